from kio.schema.errors import ErrorCode

from topiclake.broker.group.errors import GroupErrorCode


def test_codes_are_kafkas():
    for code in GroupErrorCode:
        assert int(getattr(ErrorCode, code.name.lower())) == int(code), code
