"""Suite-wide collection rules.

tests/integration/image needs TensorFlow and Horovod as built in the image; the container suite runs it
inside the image (tests/container/test_in_image.py). On the host it is collected only when
SAGETRAIN_IN_IMAGE=1, which the image sets.
"""

import os

collect_ignore_glob = [] if os.environ.get("SAGETRAIN_IN_IMAGE") == "1" else ["integration/image/*"]
