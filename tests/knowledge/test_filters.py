"""Filters over document metadata: every comparison and compound type, missing keys,
values of other types, negations, and the refusals (a 422 naming the bad part).

The documents here are a ``DocumentTable`` (what each process keeps per workspace);
``tests/knowledge/test_metadata.py`` runs the same filters through search on both stores.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

from agentcore.errors import ValidationFailed
from agentcore.knowledge._filters import DocumentTable, check_filter, check_metadata
from agentcore.knowledge.vectors import NO_LABEL
from agentcore.schema import STORED, BoundedFilter
from agentcore.storage.records import DocumentRow

DOCUMENTS = {
    "hr": {"team": "hr", "year": 2024, "public": True, "updated": "2024-03-01"},
    "it": {"team": "it", "year": 2023.0, "public": False, "updated": "2023-11-30"},
    "legal": {"team": "legal", "year": "2024", "tags": 3},
    "bare": {},
}


def table(documents: dict[str, dict[str, Any]] = DOCUMENTS) -> DocumentTable:
    made = DocumentTable()
    made.apply(
        [DocumentRow(seq, name, meta) for seq, (name, meta) in enumerate(documents.items(), 10)],
        version=1,
    )
    return made


def selected(spec: dict[str, Any], documents: dict[str, dict[str, Any]] = DOCUMENTS) -> set[str]:
    """The names of the documents ``spec`` selects."""
    chosen = table(documents).selection(check_filter(spec))
    return set(chosen.document_ids)


def eq(key: str, value: Any) -> dict[str, Any]:
    return {"type": "eq", "key": key, "value": value}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        # eq compares like with like: 2023.0 == 2023, "2024" != 2024, True != 1
        (eq("team", "hr"), {"hr"}),
        (eq("year", 2024), {"hr"}),
        (eq("year", 2023), {"it"}),
        (eq("year", "2024"), {"legal"}),
        (eq("public", True), {"hr"}),
        (eq("public", 1), set()),
        (eq("tags", True), set()),
        (eq("missing", "x"), set()),
        # ne is exactly "not eq": documents without the key, or of another type, match
        ({"type": "ne", "key": "team", "value": "hr"}, {"it", "legal", "bare"}),
        ({"type": "ne", "key": "year", "value": 2024}, {"it", "legal", "bare"}),
        ({"type": "ne", "key": "missing", "value": 1}, set(DOCUMENTS)),
        # ranges: numbers with numbers, strings with strings (ISO dates order by time)
        ({"type": "gt", "key": "year", "value": 2023}, {"hr"}),
        ({"type": "gte", "key": "year", "value": 2023}, {"hr", "it"}),
        ({"type": "lt", "key": "year", "value": 2024}, {"it"}),
        ({"type": "lte", "key": "year", "value": 2024.0}, {"hr", "it"}),
        ({"type": "gte", "key": "year", "value": "2024"}, {"legal"}),
        ({"type": "gte", "key": "updated", "value": "2024-01-01"}, {"hr"}),
        ({"type": "lt", "key": "updated", "value": "2024-01-01"}, {"it"}),
        ({"type": "gt", "key": "public", "value": 0}, set()),  # a boolean is no number
        ({"type": "gt", "key": "missing", "value": 0}, set()),
        # in / nin: eq against any listed value; nin is exactly "not in"
        ({"type": "in", "key": "team", "value": ["hr", "it"]}, {"hr", "it"}),
        ({"type": "in", "key": "year", "value": [2023, "2024"]}, {"it", "legal"}),
        ({"type": "in", "key": "public", "value": [False, 1]}, {"it"}),
        ({"type": "in", "key": "missing", "value": ["x"]}, set()),
        ({"type": "nin", "key": "team", "value": ["hr", "it"]}, {"legal", "bare"}),
        ({"type": "nin", "key": "missing", "value": ["x"]}, set(DOCUMENTS)),
        # compounds, nested
        ({"type": "and", "filters": [eq("year", 2024), eq("public", True)]}, {"hr"}),
        ({"type": "or", "filters": [eq("team", "it"), eq("tags", 3)]}, {"it", "legal"}),
        ({"type": "and", "filters": [eq("team", "hr")]}, {"hr"}),
        (
            {
                "type": "or",
                "filters": [
                    {"type": "and", "filters": [eq("team", "hr"), eq("public", False)]},
                    {"type": "nin", "key": "team", "value": ["hr", "it", "legal"]},
                ],
            },
            {"bare"},
        ),
    ],
)
def test_each_comparison_and_compound(spec: dict[str, Any], expected: set[str]) -> None:
    assert selected(spec) == expected


def test_a_metadata_change_is_seen_and_a_removed_key_no_longer_matches() -> None:
    documents = table()
    spec = check_filter(eq("team", "hr"))
    assert documents.selection(spec).document_ids == ["hr"]
    documents.apply(
        [DocumentRow(10, "hr", {"owner": "ana"}), DocumentRow(11, "it", {"team": "hr"})], 2
    )
    assert documents.selection(spec).document_ids == ["it"]
    assert documents.selection(check_filter(eq("owner", "ana"))).document_ids == ["hr"]
    assert documents.version == 2


def test_the_verdict_on_row_labels_covers_rows_of_no_document() -> None:
    documents = table()
    labels = np.array([10, 11, 12, 13, NO_LABEL, 999], dtype=np.int64)
    hr_only = documents.selection(check_filter(eq("team", "hr")))
    assert hr_only(labels).tolist() == [True, False, False, False, False, False]
    # an unknown label (a row of no document) is a document without metadata
    not_hr = documents.selection(check_filter({"type": "ne", "key": "team", "value": "hr"}))
    assert not_hr(labels).tolist() == [False, True, True, True, True, True]
    assert not hr_only.empty and not not_hr.empty
    nothing = documents.selection(check_filter(eq("team", "nobody")))
    assert nothing.empty and not nothing(labels).any()


scalars = st.one_of(
    st.sampled_from(["a", "b", "c", ""]),
    st.integers(-2, 2),
    st.sampled_from([0.5, 1.0]),
    st.booleans(),
)
metadata = st.dictionaries(st.sampled_from(["k", "j"]), scalars, max_size=2)
comparisons = st.builds(
    lambda kind, key, value: {"type": kind, "key": key, "value": value},
    st.sampled_from(["eq", "ne"]),
    st.sampled_from(["k", "j"]),
    scalars,
) | st.builds(
    lambda kind, key, values: {"type": kind, "key": key, "value": values},
    st.sampled_from(["in", "nin"]),
    st.sampled_from(["k", "j"]),
    st.lists(scalars, min_size=1, max_size=3),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(metadata, min_size=1, max_size=6), comparisons, comparisons)
def test_negations_complement_and_de_morgan_holds(
    metas: list[dict[str, Any]], a: dict[str, Any], b: dict[str, Any]
) -> None:
    documents = {f"d{i}": m for i, m in enumerate(metas)}
    everything = set(documents)

    def negated(spec: dict[str, Any]) -> dict[str, Any]:
        flip = {"eq": "ne", "ne": "eq", "in": "nin", "nin": "in"}
        return {**spec, "type": flip[spec["type"]]}

    assert selected(negated(a), documents) == everything - selected(a, documents)
    both = {"type": "and", "filters": [a, b]}
    either_not = {"type": "or", "filters": [negated(a), negated(b)]}
    assert selected(either_not, documents) == everything - selected(both, documents)


# refusals ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "param"),
    [
        ({"type": "like", "key": "a", "value": "x"}, "filter"),
        ({"key": "a", "value": "x"}, "filter"),
        ("team = hr", "filter"),
        ({"type": "eq", "key": "", "value": "x"}, "filter.key"),
        ({"type": "eq", "key": "k" * 65, "value": "x"}, "filter.key"),
        ({"type": "eq", "key": "a"}, "filter.value"),
        ({"type": "eq", "key": "a", "value": None}, "filter.value"),
        ({"type": "eq", "key": "a", "value": ["x"]}, "filter.value"),
        ({"type": "eq", "key": "a", "value": {"x": 1}}, "filter.value"),
        ({"type": "eq", "key": "a", "value": "x" * 513}, "filter.value"),
        ({"type": "eq", "key": "a", "value": float("nan")}, "filter.value"),
        ({"type": "eq", "key": "a", "value": 2**53 + 1}, "filter.value"),
        ({"type": "lt", "key": "a", "value": -(2**53) - 1}, "filter.value"),
        ({"type": "eq", "key": "a", "value": "x", "extra": 1}, "filter.extra"),
        ({"type": "gt", "key": "a", "value": True}, "filter.value"),
        ({"type": "in", "key": "a", "value": "x"}, "filter.value"),
        ({"type": "in", "key": "a", "value": []}, "filter.value"),
        ({"type": "in", "key": "a", "value": list(range(101))}, "filter.value"),
        ({"type": "in", "key": "a", "value": [[1]]}, "filter.value.0"),
        ({"type": "and", "filters": []}, "filter.filters"),
        ({"type": "and", "filters": [eq("a", 1)] * 33}, "filter.filters"),
        ({"type": "or", "key": "a", "value": 1}, "filter.filters"),
        (
            {"type": "and", "filters": [eq("a", 1), {"type": "or", "filters": [eq("b", None)]}]},
            "filter.filters.1.filters.0.value",
        ),
        # 65 comparisons in all, though no list is longer than 32
        ({"type": "and", "filters": [{"type": "or", "filters": [eq("a", 1)] * 13}] * 5}, "filter"),
    ],
)
def test_a_malformed_filter_is_a_422_naming_the_part(spec: Any, param: str) -> None:
    with pytest.raises(ValidationFailed) as refused:
        check_filter(spec)
    assert refused.value.param == param, refused.value.extra
    assert refused.value.status == 422


def test_the_largest_filter_allowed() -> None:
    spec = {"type": "and", "filters": [{"type": "or", "filters": [eq("a", 1)] * 16}] * 4}
    assert check_filter(spec) is not None  # 64 comparisons
    assert check_filter({"type": "in", "key": "k" * 64, "value": ["x" * 512] * 100}) is not None


@pytest.mark.parametrize(
    ("metadata", "param"),
    [
        ({"owner": {"name": "ana"}}, "metadata.owner"),
        ({"owner": ["ana"]}, "metadata.owner"),
        ({"owner": None}, "metadata.owner"),
        ({"owner": "x" * 513}, "metadata.owner"),
        ({"owner": "a\x00b"}, "metadata.owner"),
        ({"owner": 10**309}, "metadata.owner"),
        ({"": "x"}, "metadata"),
        ({"k" * 65: "x"}, "metadata." + "k" * 65),
        ({f"key{i}": i for i in range(17)}, "metadata"),
        (["owner"], "metadata"),
        ("owner=ana", "metadata"),
    ],
)
def test_bad_metadata_is_a_422_naming_the_key(metadata: Any, param: str) -> None:
    with pytest.raises(ValidationFailed) as refused:
        check_metadata(metadata)
    assert refused.value.param == param, refused.value.extra


def test_metadata_at_its_limits_is_accepted_as_given() -> None:
    biggest = {f"{i:0>64}": "x" * 512 for i in range(16)}
    assert check_metadata(biggest) == biggest
    mixed = {"n": 3, "f": 2.5, "b": False, "s": "", "neg": -(2.0**53), "top": 2**53}
    checked = check_metadata(mixed)
    assert checked == mixed and type(checked["n"]) is int and type(checked["b"]) is bool
    assert check_metadata(None) == {} and check_metadata({}) == {}


def test_an_older_agents_filter_with_a_large_integer_compares_exactly() -> None:
    # older versions stored agents' filters with any integer: read back, they select
    # exactly (Python compares int and float exactly), never an OverflowError
    documents = {"exact": {"n": 2**53}, "float": {"n": 1e300}, "huge": {"n": 10**309}}
    read = TypeAdapter(BoundedFilter)

    def older(spec: dict[str, Any]) -> set[str]:
        return set(
            table(documents).selection(read.validate_python(spec, context=STORED)).document_ids
        )

    assert older(eq("n", 10**309)) == {"huge"}
    assert older(eq("n", 2**53 + 1)) == set()
    assert older({"type": "in", "key": "n", "value": [10**309, 2**53]}) == {"huge", "exact"}
    assert older({"type": "lt", "key": "n", "value": 10**309}) == {"exact", "float"}
    assert older({"type": "gte", "key": "n", "value": 2**53 + 1}) == {"float", "huge"}
    with pytest.raises(ValidationFailed):
        check_filter(eq("n", 10**309))  # a new one is refused
