"""Secrets: what looks secret, what stays on its host, and masking in our own text (redact.py)."""

import io
import json
import logging
import random
import re
import shlex
import stat

import pytest
from sagetrain.config.hyperparameters import HyperparameterReader, parse_settings
from sagetrain.config.job_secret import read_job_secrets
from sagetrain.config.paths import Paths
from sagetrain.contracts import RunDir
from sagetrain.errors import UserError
from sagetrain.plan.mpi_command import forwarded_env_names
from sagetrain.redact import (
    ANCHOR_CHARACTERS,
    MASK,
    CommandLine,
    RedactingFilter,
    Redactor,
    forms,
    looks_secret,
    secret_option_texts,
    secret_option_values,
    shell_words,
    stays_on_host,
)
from sagetrain.report.job_end import JobEnd
from sagetrain.report.verdict import RankFailure


@pytest.mark.parametrize(
    "name",
    ["api_token", "WANDB_API_KEY", "db_password", "passwd", "client_secret", "HF_TOKEN", "credentials",
     "auth_header", "private_key", "key", "ssh.key", "AWS_SECRET_ACCESS_KEY", "pass", "db_pass", "pwd",
     "DB_PWD", "pat", "GH_PAT", "github-pat", "token", "secret", "auth", "Authorization", "creds",
     "passphrase", "apiKey", "dbPassword", "HFToken", "apikey", "accessToken", "secretKey", "privateKey",
     "MY_API_KEY2", "password1", "signing.key", "primary_key", "api_key_id", "keys", "refresh-token",
     "sagetrain_job_secret", "SAGETRAIN_JOB_SECRET", "private"],
)  # fmt: skip
def test_names_that_look_secret(name):
    assert looks_secret(name)


@pytest.mark.parametrize(
    "name",
    ["epochs", "learning_rate", "keyboard_layout", "monkeys", "monkey", "PATH", "SM_HPS", "keras",
     "keras_version", "batch_size", "passes", "num_passes", "bypass_cache", "compass", "passage",
     "author", "authority", "tokenizer", "tokenizer_name", "pattern", "patience", "path", "patch_size",
     "LD_LIBRARY_PATH", "PYTHONPATH", "PWD", "OLDPWD", "secretary", "hockey", "keyword", "turkey",
     "max_tokens", "num_tokens", "pad_token", "eos_token_id", "bos_token", "special_tokens", "label_key",
     "text_key", "key_dim", "key_length", "token_count", "public_key", "sort_key", "NCCL_SOCKET_IFNAME",
     "OMPI_MCA_plm_rsh_args", "SM_CHANNEL_TRAIN", "sagetrain_job_secret_channel", "ssh_key_path",
     "token_file", "secret_arn", "", "_", "123"],
)  # fmt: skip
def test_names_that_do_not(name):
    assert not looks_secret(name)


def test_aws_credentials_and_secret_named_variables_stay_on_their_host():
    env = {
        "PATH": "/bin",
        "SM_HPS": "{}",
        "AWS_ACCESS_KEY_ID": "AKIA",
        "AWS_SECRET_ACCESS_KEY": "s",
        "AWS_SESSION_TOKEN": "t",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "/v2/credentials/x",
        "AWS_DEFAULT_REGION": "eu-west-1",
        "WANDB_API_KEY": "w",
    }
    assert forwarded_env_names(env) == ["AWS_DEFAULT_REGION", "PATH", "SM_HPS"]
    assert stays_on_host("AWS_ACCESS_KEY_ID") and not stays_on_host("AWS_DEFAULT_REGION")


def test_secret_values_are_masked_as_given_inside_json_and_in_argv():
    redact = Redactor.for_job(
        {"api_token": 'tok-123"x', "epochs": 3, "password": "pw"},
        ("-x", "WANDB_API_KEY=wandb-999", "-x", "NCCL_DEBUG=INFO"),
        {"AWS_SECRET_ACCESS_KEY": "aws-secret-abc", "HOME": "/root"},
    )
    token = 'tok-123"x'
    sm_hps = json.dumps({"api_token": token})
    line = (
        f"mpirun -x NCCL_DEBUG=INFO -x WANDB_API_KEY=wandb-999 python train.py --api_token '{token}' "
        f"--epochs 3 SM_HPS={sm_hps} aws-secret-abc"
    )
    masked = redact(line)
    for secret in ("tok-123", "wandb-999", "aws-secret-abc"):
        assert secret not in masked
    assert "NCCL_DEBUG=INFO" in masked and "--epochs 3" in masked
    assert masked.count(MASK) == 4
    # Too short to mask without garbling every line ("pw"), and nothing to protect.
    assert "pw" not in Redactor.for_job({"password": "pw"}, (), {}).secrets
    assert redact.structure({"a": ["x aws-secret-abc"], "b": 1}) == {"a": [f"x {MASK}"], "b": 1}


def test_only_secret_named_x_options_are_secret():
    assert secret_option_values(("-x", "A_TOKEN=1234", "-x", "B=5678", "-mca", "x", "y=z")) == ["1234"]


def test_a_bad_secret_hyperparameter_is_named_without_its_value(tmp_path):
    read = HyperparameterReader({"api_token": "hunter22"}, tmp_path / "hp.json")
    with pytest.raises(UserError) as error:
        read.integer("api_token")
    assert "hunter22" not in error.value.cause and "field api_token" in error.value.cause


def test_custom_mpi_options_errors_mask_secret_values(tmp_path):
    with pytest.raises(UserError) as error:
        parse_settings(
            {"sagemaker_mpi_custom_mpi_options": "-np 2 -x WANDB_API_KEY=wandb-999 -x A=b"}, tmp_path / "hp"
        )
    assert "wandb-999" not in error.value.cause and "WANDB_API_KEY=***" in error.value.cause
    assert "A=b" in error.value.cause


def test_the_variables_that_stay_on_a_host_are_saved_for_its_owner_only(tmp_path):
    run_dir = RunDir(tmp_path / "run")
    run_dir.write_host_env({"AWS_SESSION_TOKEN": "t", "WANDB_API_KEY": "w"})
    assert stat.S_IMODE(run_dir.host_env_file.stat().st_mode) == 0o600
    assert run_dir.read_host_env() == {"AWS_SESSION_TOKEN": "t", "WANDB_API_KEY": "w"}
    assert RunDir(tmp_path / "absent").read_host_env() == {}


def test_keys_nested_in_dict_valued_hyperparameters_count():
    redact = Redactor.for_job(
        {
            "db": {"password": "x'pw\"1", "user": "bob-the-user"},
            "stores": [{"name": "primary", "config": {"token": "tok-nested"}}],
            "as_text": json.dumps({"auth": {"user": "u", "secret": "in-a-string"}}),
            "credentials": {"user": "cred-user", "pin": 12345},
            "epochs": 3,
        },
        (),
        {},
    )
    assert set(redact.secrets) == {"x'pw\"1", "tok-nested", "in-a-string", "cred-user", "12345"}
    # The toolkit passes a dict as k=v arguments, an inner dict as its repr: masked in either.
    assert redact("creds={'password': 'x\\'pw\"1'},user=bob") == "creds={'password': '***'},user=bob"


def test_deep_nesting_is_walked_without_recursion():
    deep: object = {"password": "deep-secret"}
    for _ in range(5000):
        deep = {"a": deep}
    assert Redactor.for_job({"nested": deep}, (), {}).secrets == ("deep-secret",)


def test_a_urls_password_is_secret_wherever_it_is():
    redact = Redactor.for_job(
        {"tracking_uri": "https://alice:s3cr'et@mlflow.example.com/x"},
        (),
        {"PIP_EXTRA_INDEX_URL": "https://bob:hunter22@pypi.example.com/simple", "HOME": "/root"},
    )
    assert set(redact.secrets) == {"s3cr'et", "hunter22"}
    assert (
        redact("pip install --index-url https://bob:hunter22@x")
        == "pip install --index-url https://bob:***@x"
    )


@pytest.mark.parametrize("value", [True, False, None, "true", "None", "pw", "  ab  ", "    "])
def test_values_that_protect_nothing_are_not_masked(value):
    assert Redactor.for_job({"password": value}, (), {}).secrets == ()


def test_every_form_a_secret_takes_is_masked():
    secret = "SQ'SECRET\"é\\ \n😀\u200b"
    redact = Redactor.of([secret])
    inner_json = json.dumps(secret)[1:-1]
    texts = [
        secret,
        shlex.quote(secret),
        shlex.join(["--x", f"a={secret}"]),
        json.dumps(secret),
        json.dumps(secret, ensure_ascii=False),
        repr(secret),
        repr([secret, "'"]),
        repr(f"{secret}'"),
        json.dumps({"args": [f"creds={ {'password': secret} }"]}),  # a repr inside JSON (SM_USER_ARGS)
        json.dumps(json.dumps({"v": secret})),  # JSON in JSON
        shlex.quote(json.dumps({"v": secret})),
        f"{ValueError(secret)!r}",
        inner_json,
    ]
    for text in texts:
        masked = redact(text)
        assert "SECRET" not in masked and MASK in masked, text


def one_alternation(secrets: list[str]) -> re.Pattern[str]:
    """What the masking finds, stated plainly: one alternation of every form of every secret, longest
    first (what the redactor once compiled, and too slow to compile at SageMaker's limits)."""
    every = set().union(*map(forms, secrets))
    return re.compile("|".join(map(re.escape, sorted(every, key=lambda form: (-len(form), form)))))


@pytest.mark.parametrize("seed", range(30))
def test_masking_finds_what_one_alternation_of_every_form_finds(seed):
    """Secrets that share their first characters, hold one another, overlap in the text, are shorter or
    longer than an anchor and hold what escaping acts on: masked exactly as the plain alternation
    masks them."""
    rng = random.Random(seed)
    alphabet = ["a", "b", "'", '"', "\\", "é", "😀", " ", "\n"]
    stem = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, ANCHOR_CHARACTERS + 2)))
    secrets = [stem + "".join(rng.choice(alphabet) for _ in range(rng.randint(4, 14))) for _ in range(4)]
    secrets.append(secrets[0][: rng.randint(4, len(secrets[0]))])  # one that begins another
    redact = Redactor.of(secrets)
    reference = one_alternation(list(redact.secrets))
    for _ in range(20):
        pieces = [rng.choice([*forms(rng.choice(secrets)), *alphabet, "xy", " ab"]) for _ in range(12)]
        text = "".join(pieces)
        assert redact(text) == reference.sub(MASK, text), (secrets, text)


def test_a_secret_at_sagemakers_limits_is_masked_in_every_form_and_only_there():
    """100 secret-named values of 2,500 characters full of quotes and non-ASCII (the redactor builds its
    pattern for these in well under a second; benchmarks/ measures it)."""
    rng = random.Random(7)
    alphabet = [*"abcdefghij0123456789", "'", '"', "\\", "é", "中", "😀", " ", "\n"]
    values = {f"api_token_{n}": "".join(rng.choice(alphabet) for _ in range(2500)) for n in range(100)}
    redact = Redactor.for_job(values, (), {})
    assert len(redact.secrets) == 100
    secret = values["api_token_42"]
    for form in (secret, json.dumps(secret), repr(secret), shlex.quote(secret), json.dumps(repr(secret))):
        masked = redact(f"before {form} after")
        assert masked.startswith("before ") and masked.endswith(" after") and MASK in masked
        assert len(masked) < 25, masked  # at most the quotes around the form are left
    assert redact("before " + secret[:-1] + " after") == "before " + secret[:-1] + " after"


def test_an_argv_is_masked_argument_by_argument_before_it_is_joined():
    redact = Redactor.of(["SQ'SECRET"])
    command = ["mpirun", "-x", "HF_TOKEN=SQ'SECRET", "python", "train.py", "--api_token", "SQ'SECRET"]
    line = redact.command_line(command)
    assert line == "mpirun -x 'HF_TOKEN=***' python train.py --api_token '***'"
    assert shlex.split(line) == redact.argv(command)
    assert str(CommandLine(("a b", "c"))) == "'a b' c"


def logged_through_filter(redactor, emit):
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    log_filter = RedactingFilter()
    log_filter.redactor = redactor
    handler.addFilter(log_filter)
    logger = logging.getLogger("sagetrain.test_redact")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        emit(logger)
    finally:
        logger.removeHandler(handler)
    return stream.getvalue()


def test_the_log_filter_masks_arguments_before_they_are_formatted():
    secret = 'it\'s "SECRET"'
    redactor = Redactor.of([secret])

    def emit(logger):
        logger.info("mpirun command: %s", CommandLine(("python", "--token", secret)))
        logger.info("%r %s", [secret], {"k": (secret,)})
        logger.info("%(value)r", {"value": secret})
        logger.info(f"pre-formatted {shlex.quote(secret)} {json.dumps(secret)}")
        try:
            raise ValueError(secret)
        except ValueError:
            logger.exception("failed on %s", "input")
        logger.info("stack", stack_info=True, extra={"ignored": secret})

    text = logged_through_filter(redactor, emit)
    assert "SECRET" not in text
    assert "mpirun command: python --token '***'" in text
    assert "['***'] {'k': ('***',)}" in text
    assert "ValueError: ***" in text


def test_the_log_filter_learns_secrets_once_the_job_is_read(tmp_path):
    log_filter = RedactingFilter()
    end = JobEnd(Paths(tmp_path), log_filter)
    end.learn_secrets(Redactor.of(["late-secret"]))
    assert log_filter.redactor.secrets == ("late-secret",)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("-x A=b  -x 'C=d e'", ["-x", "A=b", "-x", "'C=d e'"]),
        ('-x T="a \\"b" x', ["-x", 'T="a \\"b"', "x"]),
        ("-x T=a\\ b\\'c", ["-x", "T=a\\ b\\'c"]),
        ("-x T='open quote", ["-x", "T='open quote"]),
        ("", []),
    ],
)
def test_shell_words_keep_each_word_as_written(text, words):
    assert shell_words(text) == words


@pytest.mark.parametrize(
    "written",
    ["'p a'\"'\"'ss'", '"p a\'ss"', "p\\ a\\'ss", "'p a'\\''ss'"],
)
def test_secret_options_are_masked_in_the_text_they_were_written_in(written):
    text = f"-np 2 -x NCCL_DEBUG=INFO -x HF_TOKEN={written} -x A=b"
    assert shlex.split(text)[5] == "HF_TOKEN=p a'ss"
    masked = Redactor.of(secret_option_texts(text))(text)
    assert masked == "-np 2 -x NCCL_DEBUG=INFO -x HF_TOKEN=*** -x A=b"
    redact = Redactor.for_job({}, (), {}, mpi_options_text=text)
    assert "p a'ss" in redact.secrets and redact(json.dumps({"options": text})).count(MASK) == 1


def test_a_ranks_report_is_masked_also_across_its_lines():
    failure = RankFailure(
        rank=1,
        host="algo-2",
        exit_code=1,
        program="train.py",
        message="bad token 'multi\nline-secret'",
        traceback="ValueError: 'multi\\nline-secret'",
        last_lines=("before", "multi", "line-secret", "after"),
    ).masked(Redactor.of(["multi\nline-secret"]))
    assert failure.message == "bad token '***'"
    assert failure.traceback == "ValueError: '***'"
    assert failure.last_lines == ("before", "***", "after")


def test_the_job_redactor_reads_what_it_can(tmp_path):
    paths = Paths(tmp_path)
    paths.hyperparameters.parent.mkdir(parents=True)
    paths.hyperparameters.write_text(
        json.dumps(
            {
                "api_token": json.dumps("from-the-file"),
                "db": json.dumps({"password": "nested-one"}),
                "sagemaker_mpi_custom_mpi_options": json.dumps("-x HF_TOKEN='opt val' -np 2"),
                "raw": "not json {",
            }
        )
    )
    redact = read_job_secrets(tmp_path, {"WANDB_API_KEY": "from-the-env"}).redactor
    assert set(redact.secrets) >= {"from-the-file", "nested-one", "opt val", "from-the-env"}
    paths.hyperparameters.write_text("{not json")
    assert read_job_secrets(tmp_path, {}).redactor.secrets == ()
    assert read_job_secrets(tmp_path / "absent", {"A_TOKEN": "abcd"}).redactor.secrets == ("abcd",)


def test_a_bad_value_nested_under_a_secret_key_is_named_without_it(tmp_path):
    read = HyperparameterReader({"sagetrain_x": {"password": "hunter22", "n": 1}}, tmp_path / "hp.json")
    with pytest.raises(UserError) as error:
        read.boolean("sagetrain_x")
    assert "hunter22" not in error.value.cause and "'password': '***'" in error.value.cause
