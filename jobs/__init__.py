"""jobs: end-to-end jobs run from the command line (the README's main job)."""
