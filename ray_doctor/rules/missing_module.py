"""missing-module: a Ray worker could not import a module the code needs."""

from __future__ import annotations

import re
from itertools import islice

from ray_doctor.findings import Severity
from ray_doctor.model import Experiment, Failure
from ray_doctor.rules._base import Precedence, subject_name
from ray_doctor.rules._signature import (
    Hit,
    SignatureRule,
    hit_text,
    lines_matching,
    signatures,
    wording,
)

MISSING = signatures(
    wording(
        "ModuleNotFoundError",
        r"ModuleNotFoundError: No module named '([^']+)'",
        "CPython import system",
        "Python 3.6+",
        "ModuleNotFoundError: No module named 'transformers'",
    ),
    wording(
        "ImportError",
        r"ImportError: No module named '?([\w.]+)'?",
        "CPython import system",
        "Python 2.7-3.5",
        "ImportError: No module named transformers",
    ),
    wording(
        "Ray deserialization",
        r"(?:RaySystemError|System error): No module named '([^']+)'",
        "Ray worker deserializing a function or object (python/ray/_private/serialization.py)",
        "Ray 1.x-2.60",
        "ray.exceptions.RaySystemError: System error: No module named 'my_project'",
    ),
    wording(
        "Ray deserialization log",
        # `logger.exception(e)` in deserialize_objects: the error's text alone on its line
        # (behind the worker's prefix when forwarded), then the traceback.
        r"^(?:\([^()\n]*pid=\d+[^()\n]*\) )?No module named '([^']+)'[ \t\r]*$",
        "Ray worker deserializing an object (python/ray/_private/serialization.py, "
        "deserialize_objects' logger.exception)",
        "Ray 1.x-2.60",
        "(TemporaryActor pid=1495807) No module named 'vllm'",
        flags=re.MULTILINE,
    ),
    wording(
        "python -m",
        # runpy exits with "<sys.executable>: No module named <name>", unquoted, when the
        # module `python -m` was given is not installed in that interpreter. A dotted name
        # there means its package was found and lacks the submodule: not this rule's.
        r"^(?:.*[/\\])?[Pp]ython[\d.]*(?:\.exe)?: No module named (\w+)[ \t\r]*$",
        "CPython's runpy (_run_module_as_main), for `python -m MODULE`",
        "Python 3.x",
        "/usr/bin/python3: No module named nni",
        flags=re.MULTILINE,
    ),
)


FROM_REMOTE_EXCEPTION = re.compile(
    r"Failed to unpickle serialized exception|in from_ray_exception\b"
)
# A traceback through torch.load's unpickler (torch/serialization.py, any version).
TORCH_LOAD = re.compile(r"torch[/\\]serialization\.py\", line \d+, in _?load")


def _names_a_submodule(found: re.Match[str]) -> bool:
    """A dotted name whose first part was imported. Python 3 names the dotted import it was
    at ("No module named 'a.b'": `a` was found); Python 2 (its import.c, `load_next`) names
    the rest of the name from the first part it could not find, unquoted ("No module named
    a.b": `a` is missing)."""
    python2 = not found.group(0).rstrip().endswith("'")
    return "." in found.group(1) and not python2


class MissingModule(SignatureRule):
    """A module the training code imports is not installed where the worker runs.

    Symptom:
        `ModuleNotFoundError: No module named '…'` in a trial's error.txt or a worker's log,
        while the same import works on the machine the driver runs on; or a process started
        with `python -m NAME` exits with "<python>: No module named NAME".
    Likely cause:
        Workers run in their own environment: another node's image, or a Python without the
        package. Code that imports inside the training function (or unpickles objects from a
        package) needs it on every node.
    Evidence it uses:
        The import error text and the module it names, from error.txt, the driver log or the
        worker logs. Not when Ray raised it unpickling a worker's exception on the driver
        ("Failed to unpickle serialized exception"): the worker had the module, and the
        exception it raised is the failure. A dotted name (`No module named 'a.b'`) is not
        this rule's: Python 3 names the import it was at, so `a` is installed and lacks `b` (a
        version mismatch, or a local `a.py` shadowing the package). Python 2's unquoted name
        (`No module named a.b`) starts at the part it could not find: `a` is missing. Nor
        `__torch__`, TorchScript's namespace: a scripted model given to `torch.load` instead of
        `torch.jit.load`.
    Fix:
        Install it everywhere: add it to the cluster's image, or ship it with the job:
        `ray.init(runtime_env={"pip": ["package==version"]})` (or `working_dir` / `py_modules`
        for your own code). For Ray Train, `pip install "ray[train]"` on every node. For
        `python -m`, launch it with the Python of the environment that has the package.
    References:
        - https://docs.ray.io/en/latest/ray-core/handling-dependencies.html
        - https://docs.ray.io/en/latest/train/user-guides/debugging.html
    """

    specificity = Precedence.ENVIRONMENT
    id = "missing-module"
    title = "Module missing in the worker's environment"
    severity = Severity.ERROR
    example = "fixtures/tune_missing_module"
    signatures = MISSING

    def excluded(self, experiment: Experiment, failure: Failure | None) -> bool:
        # Python names the first part of a dotted import it cannot find. "No module named
        # 'a.b'" therefore says `a` was imported: the package is there and lacks `b` (a
        # version or API mismatch, or a local file `a.py` shadowing it: "'a' is not a
        # package"), which installing `a` does not fix.
        # Ray failing to unpickle a worker's exception on the driver (from_ray_exception:
        # "Failed to unpickle serialized exception"): the worker imported that module and
        # raised; its own error, which this one masks, is the failure (autogluon #3249).
        if next(lines_matching(FROM_REMOTE_EXCEPTION, experiment, failure), None):
            return True
        # The first line (of `texts_of`) a signature matches, the first signature on it.
        first = min(
            (
                (place, order, text, found)
                for order, sig in enumerate(MISSING)
                for place, text, found in islice(
                    lines_matching(sig.pattern, experiment, failure), 1
                )
            ),
            default=None,
            key=lambda hit: hit[:2],
        )
        if first is None:
            return False
        _, _, text, found = first
        # `__torch__` is TorchScript's namespace for a scripted module's classes: a
        # `torch.jit.save`d file given to `torch.load`, not a package to install.
        return (
            _names_a_submodule(found)
            or "is not a package" in text
            or found.group(1).split(".")[0] == "__torch__"
        )

    def explain(self, experiment: Experiment, hit: Hit) -> tuple[str, str]:
        module = hit.match.group(1)
        top = module.split(".")[0]
        who = subject_name(experiment, hit.trial)
        if TORCH_LOAD.search(hit_text(hit)):
            # torch.load unpickling a whole model object: the module is the code that defined
            # its class, usually the user's own, not a package to pip-install.
            message = (
                f"{who} could not load a checkpoint: it holds a pickled object whose class "
                f"lives in `{module}` (the whole model was saved, not its state_dict), and "
                f"`{module}` cannot be imported where `torch.load` runs."
            )
            fix = (
                f"Make `{top}` importable where the checkpoint is loaded (ship your code with "
                '`runtime_env={"working_dir": ...}` or `py_modules`), or save '
                "`model.state_dict()` and load it into a model built in code."
            )
            return message, fix
        if hit.signature.label == "python -m":
            python = hit.match.group(0).rsplit(": No module named", 1)[0].rsplit(") ", 1)[-1]
            message = (
                f"{who} started `{python} -m {module}`, and that Python has no `{module}`: "
                "a process launched with another environment's interpreter, or the package "
                "is not installed in it."
            )
            fix = (
                f"Launch it with the Python of the environment that has `{top}` (check which "
                f"`python` the launcher or the job's entrypoint resolves to), or install `{top}` "
                f"into `{python}`."
            )
            return message, fix
        message = (
            f"{who} failed to import `{module}`: it is not installed in the environment the "
            "worker runs in."
        )
        fix = (
            f"Install `{top}` on every node (the cluster image), or ship it with the job: "
            f'`ray.init(runtime_env={{"pip": ["{top}"]}})`; use `working_dir` / `py_modules` for '
            "your own modules."
        )
        return message, fix
