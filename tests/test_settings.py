"""`setting`: a dataclass field carrying its flag's help, and only the options given."""

from __future__ import annotations

import dataclasses

from partf.settings import CHOICES, GROUP, HELP, METAVAR, setting


def test_a_setting_is_a_field_with_its_default_and_flag_metadata():
    @dataclasses.dataclass(frozen=True)
    class Toy:
        width: int = setting(8, "how wide")
        mode: str = setting("x", "the mode", group="other", choices=["x", "y"], metavar="M")

    fields = {f.name: f for f in dataclasses.fields(Toy)}
    assert Toy() == Toy(8, "x")
    assert dict(fields["width"].metadata) == {HELP: "how wide"}
    assert dict(fields["mode"].metadata) == {
        HELP: "the mode",
        GROUP: "other",
        CHOICES: ("x", "y"),  # a list given is kept as a tuple
        METAVAR: "M",
    }
