"""missing-module: an import that fails inside a Ray worker (real Ray 2.60 run)."""

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
