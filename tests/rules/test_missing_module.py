"""missing-module: an import that fails inside a Ray worker (real Ray 2.60 run)."""

import io
import traceback

import pytest
from conftest import experiment_dir, findings_of, inspect_json


def test_names_the_module_and_runtime_env(fixtures):
    code, report = inspect_json(str(experiment_dir(fixtures, "tune_missing_module")))
    assert code == 1
    (finding,) = findings_of(report, "missing-module")
    assert "`transformerz_not_installed`" in finding["message"]
    assert "runtime_env" in finding["fix"]


def test_near_miss_import_error_of_a_name():
    text = "ImportError: cannot import name 'LlamaForCausalLM' from 'transformers' (/usr/lib/python3/site-packages/transformers/__init__.py)\n"
    _, report = inspect_json("-", stdin=text)
    assert not findings_of(report, "missing-module")


def test_ray_deserialization_logs_the_bare_message():
    """Ray's deserialize_objects logs the exception with logger.exception: its text alone on
    a line, behind the actor's prefix, then the traceback (gpustack #2415, as posted)."""
    text = (
        "(TemporaryActor pid=1495807) No module named 'vllm'\n"
        "(TemporaryActor pid=1495807) Traceback (most recent call last):\n"
        '(TemporaryActor pid=1495807)   File "/root/.local/share/pipx/venvs/gpustack/lib/'
        'python3.12/site-packages/ray/_private/serialization.py", line 460, in '
        "deserialize_objects\n"
        "(TemporaryActor pid=1495807)     obj = self._deserialize_object(data, metadata, "
        "object_ref)\n"
    )
    code, report = inspect_json("-", stdin=text)
    assert code == 1
    (finding,) = findings_of(report, "missing-module")
    assert "`vllm`" in finding["message"] and "runtime_env" in finding["fix"]


def test_a_pickled_model_needs_its_own_code():
    """torch.load of a whole pickled model needs the module its class came from, usually the
    user's own code, not a package to install (pytorch #18325): real torch text."""
    torch = pytest.importorskip("torch")
    # A pickle naming a class in a module that does not exist here, as a model saved from
    # another project's tree would.
    payload = b"\x80\x02cmodels_of_another_project\nResNet\nq\x00)\x81q\x01."
    with pytest.raises(ModuleNotFoundError) as raised:
        torch.load(io.BytesIO(payload), weights_only=False)
    text = "".join(traceback.format_exception(raised.value))
    assert "torch/serialization.py" in text
    code, report = inspect_json("-", stdin=text)
    assert code == 1
    (finding,) = findings_of(report, "missing-module")
    assert "pickled object" in finding["message"]
    assert "state_dict" in finding["fix"] and "pip" not in finding["fix"]


def test_near_miss_a_worker_exception_the_driver_cannot_unpickle():
    """Ray unpickling a worker's exception on the driver: the worker imported `_catboost` and
    raised; its error, masked here, is the failure (autogluon #3249, as posted)."""
    text = (
        "Traceback (most recent call last):\n"
        '  File "/root/miniconda3/envs/ag/lib/python3.9/site-packages/ray/exceptions.py", line '
        "46, in from_ray_exception\n"
        "    return pickle.loads(ray_exception.serialized_exception)\n"
        "ModuleNotFoundError: No module named '_catboost'\n\n"
        "The above exception was the direct cause of the following exception:\n\n"
        "Traceback (most recent call last):\n"
        '  File "/root/miniconda3/envs/ag/lib/python3.9/site-packages/ray/exceptions.py", line '
        "49, in from_ray_exception\n"
        "    raise RuntimeError(msg) from e\n"
        "RuntimeError: Failed to unpickle serialized exception\n"
    )
    _, report = inspect_json("-", stdin=text)
    assert not findings_of(report, "missing-module")
    assert report["findings"][0]["rule"] == "trial-error"


def test_python3_dotted_name_is_a_submodule_the_package_lacks():
    """Python 3 names the dotted import it was at: `json` was found and has no `nope`, which
    installing `json` does not fix (real CPython text)."""
    import subprocess
    import sys

    run = subprocess.run(
        [sys.executable, "-c", "import json.nope"], capture_output=True, text=True, check=False
    )
    assert "No module named 'json.nope'" in run.stderr
    _, report = inspect_json("-", stdin=run.stderr)
    assert not findings_of(report, "missing-module")


def test_python2_dotted_name_starts_at_the_missing_part():
    """Python 2 (import.c, load_next) names the rest of the name from the first part it could
    not find, unquoted: here `sos` is missing on the worker (ray #2515, as posted)."""
    text = (
        "Traceback (most recent call last):\n"
        '  File "/home/icg27/code/ray/python/ray/import_thread.py", line 173, in '
        "fetch_and_execute_function_to_run\n"
        "    function = pickle.loads(serialized_function)\n"
        '  File "/usr/lib/python2.7/pickle.py", line 1130, in find_class\n'
        "    __import__(module)\n"
        "ImportError: No module named sos.ros.ros_publisher_op\n"
    )
    code, report = inspect_json("-", stdin=text)
    assert code == 1
    (finding,) = findings_of(report, "missing-module")
    assert "`sos.ros.ros_publisher_op`" in finding["message"]
    assert '"pip": ["sos"]' in finding["fix"]


def test_python_dash_m_of_a_module_that_interpreter_lacks():
    """runpy's exit for `python -m NAME` when that Python has no NAME, unquoted behind the
    interpreter's path: a launcher that picked another environment's python (nni #4799).
    Real CPython text."""
    import subprocess
    import sys

    run = subprocess.run(
        [sys.executable, "-m", "no_such_module_here"], capture_output=True, text=True, check=False
    )
    assert f"{sys.executable}: No module named no_such_module_here" in run.stderr
    code, report = inspect_json("-", stdin=run.stderr)
    assert code == 1
    (finding,) = findings_of(report, "missing-module")
    assert f"`{sys.executable} -m no_such_module_here`" in finding["message"]
    assert f"into `{sys.executable}`" in finding["fix"]


@pytest.mark.parametrize("target", ["json.nope", "json"])
def test_near_miss_python_dash_m_of_a_package_it_has(target):
    """`python -m json.nope` (json is there, it lacks `nope`) and `python -m json` (a package
    with no __main__): the package is installed, so installing it fixes nothing."""
    import subprocess
    import sys

    run = subprocess.run(
        [sys.executable, "-m", target], capture_output=True, text=True, check=False
    )
    assert f"{sys.executable}: No module named json" in run.stderr
    _, report = inspect_json("-", stdin=run.stderr)
    assert not findings_of(report, "missing-module")


def test_near_miss_torchscript_namespace_is_no_package():
    """A `torch.jit.save`d model given to `torch.load`: its classes live under `__torch__`,
    TorchScript's own namespace, which no pip install provides (cavaface #57, as posted)."""
    _, report = inspect_json("-", stdin="ModuleNotFoundError: No module named '__torch__'\n")
    assert not findings_of(report, "missing-module")
