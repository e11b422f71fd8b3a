"""Which connections the master's coordinator takes on: bounded handshakes in all and per peer, places of
their own for the job's own addresses, at most three guesses of a key per pause for an address that has
never proved membership, a pause too for an outsider whose connections send no handshake, and refusals
counted for one summary line."""

from sagetrain.launch.coordinator.trust import FAILURES_BEFORE_PAUSE, PAUSE_SECONDS, Admission, HandshakeEnd


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def failed_once(admission: Admission, peer: str) -> bool:
    """One handshake of ``peer`` begun, answered and not proved; whether it was its first failure."""
    assert admission.begin(peer) and admission.may_answer(peer)
    return admission.end(peer, HandshakeEnd.FAILED)


def test_handshakes_under_way_are_bounded_in_all_and_per_peer():
    admission = Admission(clock=Clock(), max_handshakes=3, max_per_peer=2)
    assert admission.begin("10.0.0.9") and admission.begin("10.0.0.9")
    assert not admission.begin("10.0.0.9")  # its third at once
    assert admission.begin("10.0.0.2")
    assert not admission.begin("10.0.0.3")  # three under way in all
    admission.end("10.0.0.2", HandshakeEnd.UNANSWERED)
    assert admission.begin("10.0.0.3")
    assert admission.refusals() == {"10.0.0.9": 1, "10.0.0.3": 1}


def test_a_peer_whose_handshakes_keep_failing_is_paused_and_heard_again_after_the_pause():
    clock = Clock()
    admission = Admission(clock=clock)
    firsts = [failed_once(admission, "10.0.0.9") for _ in range(FAILURES_BEFORE_PAUSE)]
    assert firsts == [True] + [False] * (FAILURES_BEFORE_PAUSE - 1)  # one log line, the rest counted
    assert not admission.begin("10.0.0.9")
    assert admission.begin("10.0.0.2")  # other peers are not held up
    admission.end("10.0.0.2", HandshakeEnd.UNANSWERED)
    clock.now += PAUSE_SECONDS
    assert failed_once(admission, "10.0.0.9") is False  # heard again, with a new allowance
    assert admission.refusals() == {"10.0.0.9": FAILURES_BEFORE_PAUSE + 2}
    assert admission.refusals() == {}  # counted once


def test_an_address_that_never_proved_gets_no_more_answers_at_once_than_guesses_left():
    """Thirty-two handshakes begun at once from one address are answered three at a time at the most:
    each answer lets its sender test one guess."""
    admission = Admission(clock=Clock())
    assert all(admission.begin("10.0.0.9") for _ in range(32))
    answered = [admission.may_answer("10.0.0.9") for _ in range(32)]
    assert answered.count(True) == FAILURES_BEFORE_PAUSE
    for _ in range(32 - FAILURES_BEFORE_PAUSE):
        admission.end("10.0.0.9", HandshakeEnd.UNANSWERED)
    admission.end("10.0.0.9", HandshakeEnd.FAILED)
    assert admission.begin("10.0.0.9") and not admission.may_answer("10.0.0.9")  # 1 failed + 2 pending


def test_what_ends_before_an_answer_tests_no_guess_and_counts_for_nothing():
    admission = Admission(clock=Clock())
    for _ in range(10 * FAILURES_BEFORE_PAUSE):  # silent, slow or broken connections
        assert admission.begin("10.0.0.9")
        admission.end("10.0.0.9", HandshakeEnd.UNANSWERED)
    assert failed_once(admission, "10.0.0.9") is True  # not paused: its first failure


def test_a_peer_that_proves_membership_starts_its_count_again_and_is_answered_at_once():
    admission = Admission(clock=Clock())
    for _ in range(FAILURES_BEFORE_PAUSE - 1):
        failed_once(admission, "10.0.0.9")
    assert admission.begin("10.0.0.9") and admission.may_answer("10.0.0.9")
    admission.end("10.0.0.9", HandshakeEnd.PROVED)
    failed_once(admission, "10.0.0.9")
    # A member host's rank launchers report at once: its address is answered however many are under way.
    assert all(admission.begin("10.0.0.9") and admission.may_answer("10.0.0.9") for _ in range(10))


def test_a_handshake_begun_before_a_pause_is_not_answered_during_it():
    """The outsider's next connection is taken on while its third wrong guess is still being answered;
    once that one failed and the pause began, the next gets no answer: three guesses per pause, not four."""
    clock = Clock()
    admission = Admission(clock=clock)
    for _ in range(FAILURES_BEFORE_PAUSE - 1):
        failed_once(admission, "10.0.0.9")
    assert admission.begin("10.0.0.9") and admission.may_answer("10.0.0.9")  # the third guess
    assert admission.begin("10.0.0.9")  # the next connection, before the third has ended
    admission.end("10.0.0.9", HandshakeEnd.FAILED)  # the pause begins
    assert not admission.may_answer("10.0.0.9")
    admission.end("10.0.0.9", HandshakeEnd.UNANSWERED)
    clock.now += PAUSE_SECONDS
    assert failed_once(admission, "10.0.0.9") is False  # heard again after the pause


def test_the_jobs_own_addresses_keep_places_no_other_address_can_take():
    admission = Admission(clock=Clock(), max_handshakes=4, max_per_peer=2)
    admission.recognise(["10.0.0.2"])  # algo-2, as its name resolves
    assert all(admission.begin(f"10.0.1.{index}") for index in range(4))  # outsiders fill their places
    assert not admission.begin("10.0.1.9")
    assert admission.begin("10.0.0.2") and admission.begin("10.0.0.2")  # the job's own still get in
    assert not admission.begin("10.0.0.2")  # within its cap per address
    assert admission.begin("10.0.0.1", own=True)  # a connection from this host
    admission.end("10.0.0.2", HandshakeEnd.PROVED)
    assert not admission.begin("10.0.1.9")  # a member's handshake gave back no outsider's place


def test_an_outsider_whose_connections_send_no_handshake_is_paused_the_jobs_own_address_is_not():
    clock = Clock()
    admission = Admission(clock=clock)
    admission.recognise(["10.0.0.2"])
    for peer in ("10.0.1.7", "10.0.0.2"):
        for _ in range(FAILURES_BEFORE_PAUSE):  # silent, malformed: nothing answered
            assert admission.begin(peer)
            admission.end(peer, HandshakeEnd.MALFORMED)
    assert not admission.begin("10.0.1.7")  # paused, as after three wrong guesses
    assert admission.begin("10.0.0.2") and admission.may_answer("10.0.0.2")  # a guess left: none was tested
    assert admission.refusals() == {"10.0.1.7": FAILURES_BEFORE_PAUSE + 1, "10.0.0.2": FAILURES_BEFORE_PAUSE}
    clock.now += PAUSE_SECONDS
    assert admission.begin("10.0.1.7")
