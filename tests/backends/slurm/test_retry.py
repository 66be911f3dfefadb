"""backends/retry.attempts: the backoff every Slurm client here uses."""

from slurm_gavel.backends.slurm.retry import attempts


def test_every_attempt_but_the_first_waits_twice_as_long_as_the_one_before():
    slept: list[float] = []
    assert list(attempts(3, 0.5, slept.append)) == [0, 1, 2, 3]
    assert slept == [0.5, 1.0, 2.0]  # and none after the last attempt


def test_an_attempt_that_works_ends_the_waits():
    slept: list[float] = []
    for attempt in attempts(5, 0.5, slept.append):
        if attempt == 1:
            break
    assert slept == [0.5]


def test_no_retries_is_one_attempt_without_a_wait():
    slept: list[float] = []
    assert list(attempts(0, 0.5, slept.append)) == [0]
    assert slept == []
