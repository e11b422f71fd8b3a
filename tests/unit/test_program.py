"""User-code detection (without importing it) and each kind's argv."""

import pytest
from sagetrain.errors import UserError
from sagetrain.program.kind import (
    ProgramKind,
    adjusted_user_hyperparameters,
    classify_program,
    defines_build_model,
    program_argv,
)

KERAS_MODULE = "import tensorflow as tf\n\ndef build_model(hp):\n    return tf.keras.Sequential()\n"


def test_top_level_build_model_makes_a_keras_model_module():
    assert defines_build_model(KERAS_MODULE)
    assert defines_build_model("async def build_model(hp):\n    pass\n")


def test_build_model_elsewhere_does_not():
    assert not defines_build_model("class A:\n    def build_model(self):\n        pass\n")
    assert not defines_build_model("def main():\n    def build_model():\n        pass\n")
    assert not defines_build_model("build_model = 3\n")
    assert not defines_build_model("def build_model(:\n")  # syntax error: run as a script, Python reports it


def test_classify_without_importing(tmp_path):
    (tmp_path / "model.py").write_text("import does_not_exist_anywhere\n" + KERAS_MODULE)
    (tmp_path / "train.py").write_text("print('hi')\n")
    (tmp_path / "run.sh").write_text("echo hi\n")
    assert classify_program("model.py", tmp_path).kind is ProgramKind.KERAS_MODEL_MODULE
    assert classify_program("train.py", tmp_path).kind is ProgramKind.PYTHON_SCRIPT
    assert classify_program("train", tmp_path).kind is ProgramKind.PYTHON_SCRIPT
    assert classify_program("run.sh", tmp_path).kind is ProgramKind.SHELL_SCRIPT


def test_package_module(tmp_path):
    (tmp_path / "setup.py").write_text("from setuptools import setup\nsetup(name='x')\n")
    program = classify_program("mypkg.train", tmp_path)
    assert program.kind is ProgramKind.PYTHON_PACKAGE
    assert program_argv(program, ["--a", "1"], "python") == ["python", "-m", "mypkg.train", "--a", "1"]


def test_missing_program_and_missing_file(tmp_path):
    with pytest.raises(UserError, match="has no sagemaker_program"):
        classify_program(None, tmp_path)
    with pytest.raises(UserError, match=r"sagemaker_program 'train\.py' does not exist"):
        classify_program("train.py", tmp_path)


def test_argv_per_kind(tmp_path):
    (tmp_path / "model.py").write_text(KERAS_MODULE)
    (tmp_path / "train.py").write_text("")
    (tmp_path / "run.sh").write_text("")
    (tmp_path / "tool").write_text("#!/bin/sh\n")
    (tmp_path / "tool").chmod(0o755)
    args = ["--epochs", "3"]
    assert program_argv(classify_program("train.py", tmp_path), args, "py") == [
        "py",
        str(tmp_path / "train.py"),
        *args,
    ]
    assert program_argv(classify_program("model.py", tmp_path), args, "py") == [
        "py",
        "-m",
        "sagetrain.trainer",
        str(tmp_path / "model.py"),
    ]
    assert program_argv(classify_program("run.sh", tmp_path), args, "py") == [
        "/bin/bash",
        str(tmp_path / "run.sh"),
        *args,
    ]
    assert program_argv(classify_program("tool", tmp_path), args, "py") == [str(tmp_path / "tool"), *args]


def test_model_dir_for_tuning_jobs_like_aws():
    all_hps = {"_tuning_objective_metric": "loss", "model_dir": "s3://b/p/model"}
    assert adjusted_user_hyperparameters({"model_dir": "s3://b/p/model"}, all_hps, "job-7")["model_dir"] == (
        "s3://b/p/model/job-7/model"
    )
    assert (
        adjusted_user_hyperparameters({"model_dir": "/opt/ml/model"}, all_hps, "job-7")["model_dir"]
        == "/opt/ml/model"
    )
    assert adjusted_user_hyperparameters({"model_dir": "s3://b/m"}, {}, "job-7")["model_dir"] == "s3://b/m"


@pytest.mark.parametrize(
    ("source", "fix"),
    [
        ("def build_mdoel(hp):\n    pass\n", "rename build_mdoel to build_model"),
        ("def buildModel(hp):\n    pass\n", "rename buildModel to build_model"),
        ("def build_models(hp):\n    pass\n", "rename build_models to build_model"),
        ("def input_fn(channel, hp):\n    pass\n", "defines input_fn (a model module's optional functions)"),
        (
            "def input_fn(c, hp):\n    pass\ndef parse_record(r, hp):\n    pass\n",
            "defines input_fn and parse_record",
        ),
        ("from lib import build_model\n", "assigns or imports build_model instead of defining it"),
        ("build_model = lambda hp: None\n", "assigns or imports build_model instead of defining it"),
        ("class Models:\n    def build_model(self, hp):\n        pass\n", "inside a class or function"),
    ],
)
def test_a_module_that_looks_meant_as_a_model_module_is_named_with_the_likely_fix(tmp_path, source, fix):
    (tmp_path / "model.py").write_text(source)
    program = classify_program("model.py", tmp_path)
    assert program.kind is ProgramKind.PYTHON_SCRIPT
    assert program.near_miss.startswith("model.py ")
    assert (
        "model.py runs as a plain script, not as a Keras model module in the managed trainer"
        in program.near_miss
    )
    assert fix in program.near_miss


@pytest.mark.parametrize(
    "source",
    [
        "import keras\nmodel = keras.Sequential()\nmodel.fit()\n",
        "def main():\n    pass\n\ndef make_dataset():\n    pass\n",
        "def build_model(:\n",  # does not parse: Python reports it when it runs
        KERAS_MODULE,
    ],
)
def test_scripts_and_model_modules_are_no_near_miss(tmp_path, source):
    (tmp_path / "train.py").write_text(source)
    assert classify_program("train.py", tmp_path).near_miss == ""


def test_each_kind_says_why_it_runs_the_way_it_does(tmp_path):
    (tmp_path / "model.py").write_text(KERAS_MODULE)
    (tmp_path / "train.py").write_text("print('hi')\n")
    (tmp_path / "broken.py").write_text("def f(:\n")
    (tmp_path / "run.sh").write_text("echo hi\n")
    assert classify_program("model.py", tmp_path).why == (
        "it defines build_model at its top level: the managed trainer runs it on every rank"
    )
    assert (
        classify_program("train.py", tmp_path).why
        == "it defines no top-level build_model: it runs as a script"
    )
    assert classify_program("broken.py", tmp_path).why.startswith("it does not parse as Python (")
    assert classify_program("run.sh", tmp_path).why == "a shell script: bash runs it"


def test_a_successful_job_that_left_no_model_file_is_warned_about(tmp_path):
    from sagetrain.report.model_dir import empty_model_warning

    model_dir = tmp_path / "model"
    (model_dir / "1" / "variables").mkdir(parents=True)  # folders alone are no model
    warning = empty_model_warning(model_dir)
    assert warning is not None and warning.startswith(f"the job succeeded but left {model_dir} empty")
    (model_dir / "1" / "variables" / "variables.index").write_bytes(b"")
    assert empty_model_warning(model_dir) is None
