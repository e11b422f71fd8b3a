"""One-line error descriptions from TensorFlow's and Keras' multi-line messages (as TF 2.21 words them)."""

import pytest
from sagetrain.trainer.contract import describe_exception, describe_message

# An op error in the input pipeline of a traced step (next(iterator) inside tf.function).
TRACED_INPUT_ERROR = """Graph execution error:

Detected at node ParseSingleExample/ParseExample/ParseExampleV2 defined at (most recent call last):
<stack traces unavailable>
Error in user-defined function passed to ParallelMapDatasetV2:2 transformation with iterator: \
Iterator::Root::Prefetch::BatchV2::Shuffle::ParallelMapV2: \
Could not parse example input, value: 'not an Example'
\t [[{{node ParseSingleExample/ParseExample/ParseExampleV2}}]]
\t [[IteratorGetNext]] [Op:__inference_train_step_63]"""

# The same failure read eagerly (for batch in dataset).
EAGER_INPUT_ERROR = """{{function_node __wrapped__IteratorGetNext_output_types_2_device_/job:localhost/\
replica:0/task:0/device:CPU:0}} Feature: z (data type: float) is required but could not be found.
\t [[{{node ParseSingleExample/ParseExample/ParseExampleV2}}]] [Op:IteratorGetNext] name: """


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (TRACED_INPUT_ERROR, "InvalidArgumentError: Could not parse example input, value: 'not an Example'"),
        (
            EAGER_INPUT_ERROR,
            "InvalidArgumentError: Feature: z (data type: float) is required but could not be found.",
        ),
        (
            'in user code:\n\n    File "model.py", line 3, in call\n\n    ValueError: shapes do not match',
            "InvalidArgumentError: ValueError: shapes do not match",
        ),
        ("\x1b[31mred\x1b[0m text", "InvalidArgumentError: red text"),
        ("", "InvalidArgumentError"),
    ],
    ids=["traced-input", "eager-input", "in-user-code", "ansi", "empty"],
)
def test_describe_message_keeps_the_line_that_says_what_went_wrong(message, expected):
    assert describe_message("InvalidArgumentError", message) == expected


def test_a_list_in_a_message_is_not_taken_for_a_node_name():
    assert describe_message("ValueError", "expected [[1, 2]], got [[3]]") == (
        "ValueError: expected [[1, 2]], got [[3]]"
    )


def test_describe_exception_names_the_type_and_the_keras_cause_line():
    error = ValueError("Exception encountered when calling Dense.call().\nInput has the wrong shape")
    assert describe_exception(error) == "ValueError: Input has the wrong shape"
