"""Core-form regexes for llguidance (``typedlm/grammar/backends/llguidance_regex.py``): class escapes
spelled out, and the patterns its JSON-string quoting reads wrong declined."""

import pytest

from typedlm.grammar.backends.llguidance_regex import Declined, atoms, check_json_quoting, ecma_classes


def test_ecma_classes_are_spelled_out():
    assert ecma_classes(r"\d+\w") == "[0-9]+[0-9A-Za-z_]"
    assert ecma_classes(r"[\s\S]*") == r"[\s\S]*"
    assert ecma_classes(r"[\dx]\D") == "[0-9x][^0-9]"
    assert ecma_classes(r"[\Dx]") == "[[^0-9]x]"  # a nested class: Rust reads it as a union
    for bad in ("[]a]", "[^]"):
        with pytest.raises(Declined):
            ecma_classes(bad)


def test_atoms_are_the_single_character_pieces():
    assert list(atoms(r"^(?:[^\\]a|\x00{1,2}\u00e9.)+$")) == [r"[^\\]", "a", r"\x00", r"\u00e9", "."]
    assert list(atoms(r"[\]a]b")) == [r"[\]a]", "b"]


@pytest.mark.parametrize("rx", [r"[^\\]+", r'[^"]', r"[\x00-\x1f]", r"[\x00-\x0f]|[\x10-\x1f]",
                                r"[\x00-\x0f]a[^\x00-\x0f\\]"])
def test_sets_the_quoting_gets_wrong_are_declined(rx):
    with pytest.raises(Declined, match="control character"):
        check_json_quoting(rx)


@pytest.mark.parametrize("rx", [r"[^a]+", r"[\s\S]*", r"[^\x00-\x1f\\]", r"\D\W", r"[\x01-\x1f]", r"[^a-z]", r"[^\x00\\]",
                                r"[^\x00-\x1f\\\"]|\\n", "x"])
def test_sets_it_reads_right_pass(rx):
    check_json_quoting(rx)
