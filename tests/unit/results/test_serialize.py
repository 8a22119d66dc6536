"""perfcast.results.serialize: keys from field names, renames, omitted fields, enums, nesting, numpy, NaN."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import ClassVar

import numpy as np
import pytest
from pydantic import BaseModel

from perfcast.results.serialize import json_field, to_json


class Color(StrEnum):
    RED = "red"
    BLUE = "blue"


@dataclass(frozen=True)
class Part:
    time_s: float
    bytes: int


@dataclass(frozen=True)
class Whole:
    name: str
    color: Color
    parts: tuple[Part, ...]
    busy_energy_J: float = field(default=1.5, metadata=json_field(key="energy_busy_J"))
    cache: dict[str, float] = field(default_factory=dict, metadata=json_field(skip=True))
    note: str | None = field(default=None, metadata=json_field(omit_none=True))
    inner: Part | None = field(default=None, metadata=json_field(flatten=True))

    JSON_EXTRA: ClassVar[tuple[str, ...]] = ("total_s",)

    @property
    def total_s(self) -> float:
        return sum(p.time_s for p in self.parts)


def test_keys_are_field_names_in_order_then_declared_properties() -> None:
    w = Whole("a", Color.RED, (Part(1.0, 2), Part(0.5, 3)))
    assert list(to_json(w)) == ["name", "color", "parts", "energy_busy_J", "total_s"]
    assert to_json(w) == {"name": "a", "color": "red", "parts": [{"time_s": 1.0, "bytes": 2},
                                                                   {"time_s": 0.5, "bytes": 3}],
                          "energy_busy_J": 1.5, "total_s": 1.5}


def test_omit_none_and_flatten() -> None:
    w = Whole("a", Color.BLUE, (), note="hi", inner=Part(2.0, 4))
    out = to_json(w)
    assert out["note"] == "hi" and out["time_s"] == 2.0 and out["bytes"] == 4 and "inner" not in out
    assert "cache" not in out


def test_json_order_interleaves_fields_and_properties() -> None:
    @dataclass
    class Ordered:
        a_s: float
        b_s: float
        JSON_ORDER: ClassVar[tuple[str, ...]] = ("b_s", "sum_s", "a_s")

        @property
        def sum_s(self) -> float:
            return self.a_s + self.b_s

    assert list(to_json(Ordered(1.0, 2.0)).items()) == [("b_s", 2.0), ("sum_s", 3.0), ("a_s", 1.0)]


def test_numpy_scalars_and_arrays_become_python_numbers() -> None:
    out = to_json({"n": np.int64(3), "x": np.float64(0.25), "ok": np.bool_(True), "v": np.arange(3)})
    assert out == {"n": 3, "x": 0.25, "ok": True, "v": [0, 1, 2]}
    assert type(out["n"]) is int and type(out["x"]) is float and type(out["ok"]) is bool
    json.dumps(out)


def test_ints_stay_ints_and_floats_stay_floats() -> None:
    out = to_json(Part(time_s=2.0, bytes=2))
    assert json.dumps(out) == '{"time_s": 2.0, "bytes": 2}'


def test_nan_is_null_only_where_the_class_asks() -> None:
    @dataclass
    class Loose:
        x: float

    @dataclass
    class Strict:
        x: float
        inner: Loose
        JSON_NAN_NULL: ClassVar[bool] = True

    out = to_json(Strict(math.nan, Loose(math.nan)))
    assert out["x"] is None and math.isnan(out["inner"]["x"])


def test_enum_keys_pydantic_models_and_json_view() -> None:
    class Plan(BaseModel):
        tp: int = 2

    class Viewed:
        def json_view(self) -> Part:
            return Part(1.0, 1)

    assert to_json({Color.RED: Plan()}) == {"red": {"tp": 2}}
    assert to_json([Viewed()]) == [{"time_s": 1.0, "bytes": 1}]


def test_unknown_values_and_bad_flatten_are_refused() -> None:
    with pytest.raises(TypeError, match="object"):
        to_json(object())
    with pytest.raises(TypeError, match="key"):
        to_json({1: 2})

    @dataclass
    class Bad:
        x: float = field(default=1.0, metadata=json_field(flatten=True))

    with pytest.raises(TypeError, match="flattened"):
        to_json(Bad())
