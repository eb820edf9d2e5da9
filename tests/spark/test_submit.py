"""Spark as users run it: the data source found by name in a plain session, and the pipeline
job submitted with `spark-submit` to a real standalone master and worker on 127.0.0.1.

- A SparkSession built with nothing of ours (no build_session, no register call), in a
  fresh process and JVM, reads and writes with `format("logcentric")`: PySpark 4 finds the
  installed `pyspark_logcentric` module.
- `spark-submit --master spark://...` runs jobs/pipeline.py on the standalone worker (the
  master's record of the application and the executor's folder in the worker's work dir
  show it), not on the job's own local[*].
- Executors whose Python cannot import the package (a separate interpreter with only the
  dependencies, no PYTHONPATH, the worker's own directory) run the job when the package's
  wheel is shipped with `--py-files` as a .zip; without it the same job fails.
- The cluster is named with `--cluster`: the worker's environment has no clusters file, so
  the name is resolved on the driver only.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import tomllib
import venv
from pathlib import Path

import pyspark
import pytest

import logcentric
from logcentric import Column, clusters
from tests.spark.conftest import addresses, credentials_path, start_cluster
from tests.spark.standalone import StandaloneSpark, spark_env

pytestmark = [pytest.mark.spark, pytest.mark.integration]

REPO = Path(__file__).resolve().parents[2]
PIPELINE = REPO / "jobs" / "pipeline.py"
SUBMIT_TIMEOUT_S = 600.0
PLAIN_SESSION_TIMEOUT_S = 300.0
ROWS = 2000


def run(args: list[str], *, env: dict, cwd: Path, timeout_s: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        args, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout_s, check=False
    )


def output(proc: subprocess.CompletedProcess) -> str:
    return f"exit {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr[-6000:]}"


# ------------------------------------------------------------ the plain session


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from start_cluster(tmp_path_factory.mktemp("submit-cluster"), 1, 1)


@pytest.mark.timeout(600)
def test_format_is_found_by_name_in_a_plain_session_without_register(cluster, tmp_path):
    coordinators = addresses(cluster)
    creds = credentials_path(cluster) or ""  # the option "credentials" ("": none)
    with logcentric.connect(coordinators, timeout_s=60.0, credentials=creds or None) as client:
        for name in ("plain_in", "plain_out"):
            client.create_table(
                name, [Column("id", "int64", key=True), Column("v", "string")], num_tablets=2
            )
        with client.new_session() as session:
            session.insert(client.table("plain_in"), [{"id": i, "v": f"v{i}"} for i in range(50)])
        assert not session.errors
    script = tmp_path / "plain.py"
    script.write_text(
        textwrap.dedent(
            f"""
            from pyspark.sql import SparkSession

            spark = (
                SparkSession.builder.master("local[1]")
                .config("spark.ui.enabled", "false")
                .getOrCreate()
            )
            df = (
                spark.read.format("logcentric")
                .option("coordinators", {coordinators!r})
                .option("credentials", {creds!r})
                .option("table", "plain_in")
                .load()
            )
            print("COUNT", df.count())
            (
                df.where("id < 10").write.format("logcentric")
                .option("coordinators", {coordinators!r})
                .option("credentials", {creds!r})
                .option("table", "plain_out")
                .mode("append")
                .save()
            )
            spark.stop()
            """
        )
    )
    # A fresh interpreter and JVM; nothing on PYTHONPATH; a directory outside the checkout:
    # the package is found as installed (the editable install of ./dev).
    env = spark_env(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    proc = run(
        [sys.executable, str(script)], env=env, cwd=tmp_path, timeout_s=PLAIN_SESSION_TIMEOUT_S
    )
    assert proc.returncode == 0, output(proc)
    assert "COUNT 50" in proc.stdout, output(proc)
    with logcentric.connect(coordinators, timeout_s=60.0, credentials=creds or None) as client:
        rows = client.table("plain_out").to_arrow().to_pylist()
    assert sorted(r["id"] for r in rows) == list(range(10))


# ------------------------------------------------------------ spark-submit, standalone


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    """One master and one worker (1 core, 1 GiB). The worker's environment stands for
    another host's: no clusters file (HOME elsewhere, no LOGCENTRIC_* variables), no
    PYTHONPATH."""
    root = tmp_path_factory.mktemp("standalone")
    home = root / "worker-home"
    home.mkdir()
    worker_env = {
        k: v for k, v in spark_env(HOME=str(home)).items() if not k.startswith("LOGCENTRIC_")
    }
    with StandaloneSpark(root, worker_env=worker_env) as spark:
        yield spark


@pytest.fixture(scope="module")
def named_cluster(tmp_path_factory):
    """A local cluster registered under a name in this run's clusters file, with its
    admin's credentials file: the job finds both by the name (--cluster)."""
    for c in start_cluster(tmp_path_factory.mktemp("submit-named"), 1, 1):
        clusters.register(
            "submit-test", c.spec.coordinator_addresses, credentials=credentials_path(c) or ""
        )
        yield c


def submit(
    standalone: StandaloneSpark,
    tmp_path: Path,
    app: str,
    *,
    conf: dict[str, str] | None = None,
    py_files: Path | None = None,
    job_args: tuple[str, ...] = (),
) -> subprocess.CompletedProcess:
    args = [
        str(Path(sys.executable).parent / "spark-submit"),
        "--master", standalone.url,
        "--name", app,
        "--conf", "spark.ui.enabled=false",
        "--conf", "spark.executor.memory=768m",
    ]  # fmt: skip
    for key, value in (conf or {}).items():
        args += ["--conf", f"{key}={value}"]
    if py_files is not None:
        args += ["--py-files", str(py_files)]
    args += [
        str(PIPELINE),
        "--cluster", "submit-test",
        "--rows", str(ROWS),
        "--slices", "2",
        "--num-tablets", "2",
        "--table-prefix", f"{app.replace('-', '_')}_",
        "--workdir", str(tmp_path / "workdir"),
        *job_args,
    ]  # fmt: skip
    env = spark_env(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    return run(args, env=env, cwd=tmp_path, timeout_s=SUBMIT_TIMEOUT_S)


def assert_ran_on_the_worker(standalone: StandaloneSpark, app: str) -> None:
    record = standalone.completed_app(app)
    assert record["state"] == "FINISHED", record
    logs = standalone.executor_logs(record["id"])
    assert logs, f"no executor folder for {record['id']} under {standalone.work_dir}"
    text = "\n".join(p.read_text(errors="replace") for p in logs)
    assert "Running task" in text, text[-3000:]


@pytest.mark.timeout(900)
def test_pipeline_submitted_to_a_standalone_master_runs_on_its_worker(
    standalone, named_cluster, tmp_path
):
    proc = submit(standalone, tmp_path, "pipeline-installed")
    assert proc.returncode == 0, output(proc)
    # The master is spark-submit's, not the job's default local[*].
    assert f"Spark master {standalone.url}," in proc.stdout, output(proc)
    assert "RESULT: OK" in proc.stdout.splitlines(), output(proc)
    assert_ran_on_the_worker(standalone, "pipeline-installed")


def executor_python_without_the_package(root: Path) -> Path:
    """An interpreter with the project's dependencies (pyspark, pyarrow, pyzmq, protobuf:
    this venv's site-packages, added by a .pth) but not the package: this venv's editable
    install is a .pth of its own site-packages, which a directory added by a .pth does not
    process."""
    venv.create(root, with_pip=False, symlinks=True)
    site = next(root.glob("lib/python3*/site-packages"))
    (site / "project_dependencies.pth").write_text(str(Path(pyspark.__file__).parents[1]) + "\n")
    return root / "bin" / "python"


def build_wheel(out: Path) -> Path:
    """`pip wheel` of the working tree's packages (copied, so the build leaves nothing in
    the checkout), shipped as a .zip: PySpark puts only .zip/.egg/.jar of --py-files on the
    Python workers' path."""
    src = out / "src"
    include = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = {p.rstrip("*") for p in include["packages"]["find"]["include"]}
    src.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    for package in sorted(packages):
        shutil.copytree(REPO / package, src / package, ignore=shutil.ignore_patterns("__pycache__"))
    dist = out / "dist"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--quiet", "-w", str(dist), str(src)],
        capture_output=True, text=True, timeout=300, check=False, cwd=out,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (wheel,) = dist.glob("logcentric-*.whl")
    return shutil.copy2(wheel, out / "logcentric.zip")


@pytest.mark.timeout(1200)
def test_executors_without_the_package_get_it_from_py_files(standalone, named_cluster, tmp_path):
    python = executor_python_without_the_package(tmp_path / "executor-venv")
    probe = run(
        [str(python), "-c", "import pyspark, pyarrow, zmq, google.protobuf; import logcentric"],
        env=spark_env(),
        cwd=tmp_path,
        timeout_s=60,
    )
    assert "No module named 'logcentric'" in probe.stderr, output(probe)
    conf = {"spark.pyspark.python": str(python), "spark.pyspark.driver.python": sys.executable}

    # Without --py-files the executors (and the driver's Python workers, which run the same
    # interpreter) cannot import the data source: the job fails.
    failed = submit(
        standalone, tmp_path, "pipeline-no-py-files", conf=conf, job_args=("--log-level", "DEBUG")
    )
    assert failed.returncode == 1, output(failed)
    assert "No module named 'logcentric'" in failed.stdout + failed.stderr, output(failed)
    assert "RESULT: OK" not in failed.stdout

    shipped = build_wheel(tmp_path / "wheel")
    proc = submit(standalone, tmp_path, "pipeline-py-files", conf=conf, py_files=shipped)
    assert proc.returncode == 0, output(proc)
    assert "RESULT: OK" in proc.stdout.splitlines(), output(proc)
    assert_ran_on_the_worker(standalone, "pipeline-py-files")
