import pytest

from inifile import Config, ParseError, dumps, parse

SAMPLE = """\
# global settings
name = demo
debug = off

[server]
host = 127.0.0.1
port = 8080 ; the default port
debug = yes

[paths]
Root: /srv/app
include = a, b ,, c
motd = Hello
    world
"""


def test_sections_in_order():
    assert parse(SAMPLE).sections() == ["server", "paths"]


def test_plain_value():
    assert parse(SAMPLE).get("server", "host") == "127.0.0.1"


def test_inline_comment_is_stripped():
    assert parse(SAMPLE).get("server", "port") == "8080"


def test_hash_inline_comment():
    assert parse("[a]\nx = 1 # one\n").get("a", "x") == "1"


def test_colon_separator_and_key_case():
    assert parse(SAMPLE).get("paths", "root") == "/srv/app"


def test_keys_are_case_insensitive_on_lookup():
    assert parse(SAMPLE).get("paths", "ROOT") == "/srv/app"


def test_default_is_inherited():
    assert parse(SAMPLE).get("paths", "name") == "demo"


def test_section_overrides_default():
    cfg = parse(SAMPLE)
    assert cfg.get_bool("server", "debug") is True
    assert cfg.get_bool("paths", "debug") is False


def test_get_int():
    assert parse(SAMPLE).get_int("server", "port") == 8080


def test_get_int_hex():
    assert parse("[a]\nmask = 0x1f\n").get_int("a", "mask") == 31


def test_get_int_fallback():
    assert parse(SAMPLE).get_int("server", "missing", fallback=7) == 7


def test_get_bool_rejects_garbage():
    with pytest.raises(ValueError):
        parse("[a]\nflag = maybe\n").get_bool("a", "flag")


def test_get_list_skips_empty_items():
    assert parse(SAMPLE).get_list("paths", "include") == ["a", "b", "c"]


def test_get_list_missing_is_empty():
    assert parse(SAMPLE).get_list("paths", "nothing") == []


def test_continuation_lines():
    assert parse(SAMPLE).get("paths", "motd") == "Hello\nworld"


def test_duplicate_key_last_wins():
    assert parse("[a]\nx = 1\nx = 2\n").get("a", "x") == "2"


def test_missing_fallback():
    assert parse(SAMPLE).get("server", "nope", fallback="z") == "z"


def test_unknown_section_raises():
    with pytest.raises(KeyError):
        parse(SAMPLE).items("nope")


def test_header_without_bracket_raises_with_line():
    with pytest.raises(ParseError) as err:
        parse("[a]\nx = 1\n[broken\n")
    assert err.value.lineno == 3


def test_empty_section_name_raises():
    with pytest.raises(ParseError):
        parse("[ ]\n")


def test_line_without_separator_raises():
    with pytest.raises(ParseError) as err:
        parse("[a]\njust words\n")
    assert err.value.lineno == 2


def test_comment_lines_ignored():
    cfg = parse("; c\n# c\n[a]\n  # indented comment\nx = 1\n")
    assert cfg.items("a") == {"x": "1"}


def test_value_may_contain_separator():
    assert parse("[a]\nurl = http://x:80/a=b\n").get("a", "url") == "http://x:80/a=b"


def test_dumps_round_trip():
    cfg = parse(SAMPLE)
    again = parse(dumps(cfg))
    for section in cfg.sections():
        assert again.items(section) == cfg.items(section)


def test_dumps_default_first():
    text = dumps(parse(SAMPLE))
    assert text.startswith("[DEFAULT]\n")


def test_set_and_add_section():
    cfg = Config()
    cfg.add_section("x")
    cfg.set("x", " Key ", "v")
    assert cfg.get("x", "key") == "v"
    with pytest.raises(KeyError):
        cfg.set("y", "k", "v")
    with pytest.raises(ValueError):
        cfg.add_section(" padded ")
