"""Output and error text: cleaned (NUL, invalid UTF-8, lone surrogates) and capped on character boundaries."""

from chime_worker.text import MAX_ERROR_BYTES, clean, head, tail


def test_nul_and_invalid_utf8_become_replacement_characters():
    assert clean(b"a\0b") == "a\ufffdb"
    assert clean(b"ok \xff\xfe end") == "ok \ufffd\ufffd end"
    assert clean("plain\ttext\n\x1b[0m") == "plain\ttext\n\x1b[0m"
    assert "\ufffd" in clean("lone \ud800 surrogate")
    clean("lone \ud800 surrogate").encode("utf-8")  # storable


def test_caps_cut_at_character_boundaries():
    text = "aé€😀"  # 1 + 2 + 3 + 4 bytes
    for limit in range(len(text.encode()) + 2):
        t, h = tail(text, limit), head(text, limit)
        assert len(t.encode()) <= limit and text.endswith(t), (limit, t)
        assert len(h.encode()) <= limit and text.startswith(h), (limit, h)
    assert tail(text, 5) == "😀"
    assert head(text, 5) == "aé"


def test_cleaning_comes_before_the_cap():
    # Three NULs become nine bytes: the cap applies to what is stored.
    assert tail("\0\0\0", 6) == "\ufffd\ufffd"
    assert tail("a€b", 3) == "b"
    assert tail("a€b\0", 6) == "b\ufffd"
    error = head("é" * MAX_ERROR_BYTES + "\0", MAX_ERROR_BYTES)
    assert len(error.encode()) <= MAX_ERROR_BYTES and "\0" not in error


def test_a_multi_byte_char_cut_at_the_cap_leaves_no_partial_character():
    assert tail("x€ab".encode(), 4) == "ab"
    assert tail(b"\xe2\x82\xacab\xe2\x82", 5) == "ab\ufffd"


def test_the_tail_keeps_the_last_bytes_of_a_long_output():
    assert tail("0123456789abcdef", 8) == "89abcdef"
    assert len(tail("xyz\n" * 10_000, 100).encode()) == 100
