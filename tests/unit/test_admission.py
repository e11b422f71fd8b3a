"""Which connections the master's coordinator takes on: bounded handshakes in all and per peer, a pause
for a peer whose handshakes keep failing, and refusals counted for one summary line."""

from sagetrain.launch.admission import FAILURES_BEFORE_PAUSE, PAUSE_SECONDS, Admission


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_handshakes_under_way_are_bounded_in_all_and_per_peer():
    admission = Admission(clock=Clock(), max_handshakes=3, max_per_peer=2)
    assert admission.begin("10.0.0.9") and admission.begin("10.0.0.9")
    assert not admission.begin("10.0.0.9")  # its third at once
    assert admission.begin("10.0.0.2")
    assert not admission.begin("10.0.0.3")  # three under way in all
    admission.end("10.0.0.2", proved=True)
    assert admission.begin("10.0.0.3")
    assert admission.refusals() == {"10.0.0.9": 1, "10.0.0.3": 1}


def test_a_peer_whose_handshakes_keep_failing_is_paused_and_heard_again_after_the_pause():
    clock = Clock()
    admission = Admission(clock=clock)
    firsts = []
    for _ in range(FAILURES_BEFORE_PAUSE):
        assert admission.begin("10.0.0.9")
        firsts.append(admission.end("10.0.0.9", proved=False))
    assert firsts == [True] + [False] * (FAILURES_BEFORE_PAUSE - 1)  # one log line, the rest counted
    assert not admission.begin("10.0.0.9")
    assert admission.begin("10.0.0.2")  # other peers are not held up
    admission.end("10.0.0.2", proved=True)
    clock.now += PAUSE_SECONDS
    assert admission.begin("10.0.0.9")
    assert admission.refusals() == {"10.0.0.9": FAILURES_BEFORE_PAUSE + 1}
    assert admission.refusals() == {}  # counted once


def test_a_peer_that_proves_membership_starts_its_count_of_failures_again():
    admission = Admission(clock=Clock())
    for _ in range(FAILURES_BEFORE_PAUSE - 1):
        admission.begin("10.0.0.9")
        admission.end("10.0.0.9", proved=False)
    admission.begin("10.0.0.9")
    admission.end("10.0.0.9", proved=True)
    admission.begin("10.0.0.9")
    admission.end("10.0.0.9", proved=False)
    assert admission.begin("10.0.0.9")
