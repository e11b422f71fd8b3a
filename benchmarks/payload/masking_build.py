"""Figure 16: masking at SageMaker's limits, inside the image.

    python masking_build.py        # prints one line: BENCH masking {json}

100 secret-named hyperparameter values of 2,500 characters (SageMaker's limits), full of what escaping acts
on (quotes, backslashes, non-ASCII, newlines), seeded. Measured: building the image's redactor and its
pattern (its first masking), and masking one 3 KB line holding a secret; and the same for the former
method, one regular expression alternating every form of every secret, longest first.
"""

from __future__ import annotations

import json
import random
import re
import time

from sagetrain.redact import MASK, Redactor, forms

VALUES = 100
CHARACTERS = 2_500
ALPHABET = [*"abcdefghijklmnopqrstuvwxyz0123456789", "'", '"', "\\", "é", "中", "😀", " ", "\n"]
LINE_REPEATS = 200


def hyperparameters() -> dict[str, str]:
    rng = random.Random(0)
    return {
        f"api_token_{index}": "".join(rng.choice(ALPHABET) for _ in range(CHARACTERS))
        for index in range(VALUES)
    }


def per_line(mask: object, line: str) -> float:
    started = time.perf_counter()
    for _ in range(LINE_REPEATS):
        mask(line)  # type: ignore[operator]
    return (time.perf_counter() - started) / LINE_REPEATS


def main() -> None:
    values = hyperparameters()
    line = "a log line about the job " * 20 + values["api_token_7"] + " and its end"
    started = time.perf_counter()
    redactor = Redactor.for_job(values, (), {})
    assert MASK in redactor(line)  # the first masking builds the pattern
    build = time.perf_counter() - started
    started = time.perf_counter()
    every = set().union(*map(forms, redactor.secrets))
    former = re.compile("|".join(map(re.escape, sorted(every, key=lambda form: (-len(form), form)))))
    former_build = time.perf_counter() - started
    assert former.sub(MASK, line) == redactor(line)
    result = {
        "build_seconds": build,
        "mask_line_seconds": per_line(redactor, line),
        "former_build_seconds": former_build,
        "former_mask_line_seconds": per_line(lambda text: former.sub(MASK, text), line),
        "forms": len(every),
        "line_characters": len(line),
    }
    print("BENCH masking " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
