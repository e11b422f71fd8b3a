"""What SageMaker users import beyond TensorFlow (container/pins/python-added.txt), each used once the way
training code uses it, offline, in a container of either image: test_image_contents.py runs it on the CPU
image, test_gpu_image.py on the GPU image."""

import json

# Each line does real work with its package; the last line is a JSON report.
USE_SCRIPT = """
import json, importlib.metadata as md
import numpy as np
import tensorflow as tf
import tensorflow_text as text
vocabulary = tf.lookup.StaticVocabularyTable(
    tf.lookup.KeyValueTensorInitializer(["sage", "##maker"], [0, 1], value_dtype=tf.int64), 1
)
words = text.WhitespaceTokenizer().tokenize(["SageMaker trains TensorFlow"])
pieces = text.WordpieceTokenizer(vocabulary, token_out_type=tf.string).tokenize(["sagemaker"])
import tensorflow_datasets as tfds
features = tfds.features.FeaturesDict(
    {"image": tfds.features.Image(shape=(2, 2, 1)), "label": tfds.features.ClassLabel(num_classes=3)}
)
encoded = features.encode_example({"image": np.zeros((2, 2, 1), np.uint8), "label": 2})
import pandas as pd
frame = pd.DataFrame({"host": ["algo-1", "algo-2", "algo-1"], "loss": [0.5, 0.25, 0.25]})
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler
x = StandardScaler().fit_transform(np.array([[0.0], [1.0], [2.0], [3.0]]))
import cv2
import yaml
print(json.dumps({
    "words": [[token.decode() for token in row] for row in words.to_list()],
    "pieces": [[token.decode() for token in row] for row in pieces.to_list()],
    "mnist": "mnist" in tfds.list_builders(with_community_datasets=False),
    "encoded_label": int(encoded["label"]),
    "mean_loss": frame.groupby("host")["loss"].mean().to_dict(),
    "predicted": LogisticRegression().fit(x, [0, 0, 1, 1]).predict(x).tolist(),
    "resized": list(cv2.resize(np.zeros((4, 4), np.uint8), (2, 2), interpolation=cv2.INTER_AREA).shape),
    "config": yaml.safe_load("epochs: 3\\nlayers: [64, 32]"),
    "versions": {name: md.version(name) for name in [
        "pandas", "scikit-learn", "opencv-python-headless", "tensorflow-datasets", "tensorflow-text",
        "pyyaml", "awscli"]},
}))
"""

EXPECTED = {
    "words": [["SageMaker", "trains", "TensorFlow"]],
    "pieces": [["sage", "##maker"]],
    "mnist": True,
    "encoded_label": 2,
    "mean_loss": {"algo-1": 0.375, "algo-2": 0.25},
    "predicted": [0, 0, 1, 1],
    "resized": [2, 2],
    "config": {"epochs": 3, "layers": [64, 32]},
}

# `aws` answers without credentials or a network: its version, and a request skeleton, which loads the
# service's model (the CLI's own copy of botocore, whose models the image stores compressed).
AWS_CLI_SCRIPT = "aws --version && aws s3api list-buckets --generate-cli-skeleton"


def report(output: str) -> dict:
    """The JSON report USE_SCRIPT prints last."""
    return json.loads(output.strip().splitlines()[-1])
