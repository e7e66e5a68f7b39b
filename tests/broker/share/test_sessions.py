"""Share sessions: epochs, replacement, closing and the cache limit."""

import pytest

from topiclake.broker.share.sessions import (INVALID_SHARE_SESSION_EPOCH, SHARE_SESSION_LIMIT_REACHED,
                                             SHARE_SESSION_NOT_FOUND, SessionError, ShareSessions)


def code_of(call) -> int:
    with pytest.raises(SessionError) as info:
        call()
    return info.value.code


def test_epochs_follow_each_request_and_a_new_session_replaces_the_old():
    sessions = ShareSessions(max_sessions=2)
    session, replaced = sessions.open("g", "m")
    assert replaced is None and session.epoch == 1
    sessions.use("g", "m", 1).bump()
    assert code_of(lambda: sessions.use("g", "m", 1)) == INVALID_SHARE_SESSION_EPOCH
    assert sessions.use("g", "m", 2) is session
    again, replaced = sessions.open("g", "m")
    assert replaced is session and again.epoch == 1
    session.epoch = 2**31 - 1
    session.bump()
    assert session.epoch == 1  # wraps past the largest int32
    assert sessions.close("g", "m") is again and code_of(lambda: sessions.use("g", "m", 1)) == SHARE_SESSION_NOT_FOUND


def test_a_full_cache_refuses_new_sessions_but_lets_members_reopen_theirs():
    sessions = ShareSessions(max_sessions=2)
    sessions.open("g", "a")
    sessions.open("g", "b")
    assert code_of(lambda: sessions.open("g", "c")) == SHARE_SESSION_LIMIT_REACHED
    sessions.open("g", "a")  # its own session is replaced, not added
    assert [s.member_id for s in sessions.of_group("g")] == ["b", "a"] and len(sessions) == 2
