"""buildspec.yml's registry steps as a dry run (SAGETRAIN_REGISTRY=none) against the built CPU image:
login and push are printed, not done, and the tags say what is inside. The build phase (both variants,
then this suite) is what scripts/test.sh runs already; scripts/run-buildspec runs it all by hand."""

import subprocess
import sys

from conftest import DEFAULT_IMAGE, REPO_ROOT

REGISTRY = "registry.invalid/sagemaker-tf-horovod"


def test_login_and_publish_dry_run_tag_the_cpu_image_and_push_nothing(cpu_image):
    # The fixture builds it; scripts/push publishes the name build.sh gives it, whatever the suite tests.
    published = DEFAULT_IMAGE
    sha = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    tags = [f"{REGISTRY}:2.21.0-cpu-py311-{sha[:12]}", f"{REGISTRY}:2.21.0-cpu"]
    try:
        runner = str(REPO_ROOT / "scripts" / "run-buildspec")
        done = subprocess.run(
            [
                sys.executable, runner, "--phases", "pre_build,post_build",
                "--env", "SAGETRAIN_REGISTRY=none", "--env", "VARIANTS=cpu",
            ],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        lines = done.stdout.splitlines()
        assert f"dry run: aws ecr get-login-password | docker login {REGISTRY.split('/')[0]}" in lines
        assert [line for line in lines if line.startswith("dry run: docker push")] == [
            f"dry run: docker push {tag}" for tag in tags
        ]
        image_id = subprocess.run(
            ["docker", "image", "inspect", "-f", "{{.Id}}", published, *tags],
            capture_output=True, text=True, check=True,
        ).stdout.split()  # fmt: skip
        assert len(set(image_id)) == 1, "every tag names the CPU image"
    finally:
        subprocess.run(["docker", "image", "rm", *tags], capture_output=True, check=False)
