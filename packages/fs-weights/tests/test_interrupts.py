"""Ctrl-C in a command body: a KeyboardInterrupt, kept for later when it lands inside a finalizer (where Python
would print it as "Exception ignored" and drop it, and the command would run to its end)."""

import signal
import sys

import pytest

from fs_weights import interrupts
from fs_weights.command_line import run_main


def test_a_ctrl_c_inside_a_finalizer_is_kept_for_the_next_check():
    class Disposed:
        def __del__(self):
            interrupts._interrupt(signal.SIGINT, sys._getframe())  # as if SIGINT came while the gc ran this

    Disposed()  # the finalizer runs here; nothing may escape it
    with pytest.raises(KeyboardInterrupt):
        interrupts.check()
    interrupts.check()  # raised once, then cleared


def test_a_ctrl_c_anywhere_else_raises_at_once():
    with pytest.raises(KeyboardInterrupt):
        interrupts._interrupt(signal.SIGINT, sys._getframe())
    interrupts.check()  # nothing deferred


def test_a_body_that_finished_over_a_kept_ctrl_c_still_ends_with_130():
    def body() -> int:
        class Disposed:
            def __del__(self):
                interrupts._interrupt(signal.SIGINT, sys._getframe())

        Disposed()
        return 0

    before = signal.getsignal(signal.SIGINT)
    try:
        assert run_main("fs-test", body, ()) == 130
    finally:
        signal.signal(signal.SIGINT, before)
