import pytest

from unitconv import Quantity, UnitError, convert, dimension, format_quantity, parse


def test_km_to_m():
    assert convert(3, "km", "m") == 3000


def test_m_to_km():
    assert convert(1500, "m", "km") == 1.5


def test_inches_to_cm():
    assert convert(1, "in", "cm") == pytest.approx(2.54)


def test_miles_to_km():
    assert convert(1, "mi", "km") == pytest.approx(1.609344)


def test_pounds_to_kg():
    assert convert(1, "lb", "kg") == pytest.approx(0.45359237)


def test_hours_to_minutes():
    assert convert(2, "h", "min") == 120


def test_days_to_hours():
    assert convert(1.5, "d", "h") == 36


def test_binary_data_units():
    assert convert(1, "gib", "mib") == 1024
    assert convert(1, "gb", "mb") == 1000


def test_same_unit_identity():
    assert convert(7.25, "kg", "kg") == 7.25


def test_aliases_and_case():
    assert convert(2, "Kilometers", "METERS") == 2000
    assert convert(3, "feet", "in") == pytest.approx(36)


def test_celsius_to_fahrenheit():
    assert convert(100, "c", "f") == pytest.approx(212)
    assert convert(-40, "c", "f") == pytest.approx(-40)


def test_fahrenheit_to_celsius():
    assert convert(32, "f", "c") == pytest.approx(0)


def test_kelvin():
    assert convert(0, "c", "k") == pytest.approx(273.15)
    assert convert(0, "k", "c") == pytest.approx(-273.15)


def test_below_absolute_zero():
    with pytest.raises(UnitError):
        convert(-300, "c", "k")


def test_absolute_zero_itself_ok():
    assert convert(0, "k", "f") == pytest.approx(-459.67)


def test_incompatible_dimensions():
    with pytest.raises(UnitError):
        convert(1, "kg", "m")


def test_unknown_unit():
    with pytest.raises(UnitError):
        convert(1, "parsec", "m")


def test_dimension():
    assert dimension("ft") == "length"
    assert dimension("Celsius") == "temperature"
    assert dimension("wk") == "time"


def test_parse():
    assert parse("3.5 km") == Quantity(3.5, "km")
    assert parse("-40F") == Quantity(-40.0, "f")
    assert parse(" 2 hours ") == Quantity(2.0, "h")
    assert parse("1e3 g") == Quantity(1000.0, "g")


def test_parse_rejects():
    for bad in ("km", "3 km 4", "three km", "5 furlongs"):
        with pytest.raises(UnitError):
            parse(bad)


def test_quantity_to():
    assert Quantity(2, "km").to("m") == Quantity(2000, "m")


def test_quantity_add_converts():
    total = Quantity(1, "km") + Quantity(500, "m")
    assert total == Quantity(1.5, "km")


def test_adding_temperatures_rejected():
    with pytest.raises(UnitError):
        Quantity(1, "c") + Quantity(2, "c")


def test_format_quantity():
    assert format_quantity(Quantity(1500.0, "m")) == "1500 m"
    assert format_quantity(Quantity(2.5, "kg")) == "2.5 kg"
    assert format_quantity(Quantity(1 / 3, "h"), digits=3) == "0.333 h"
    assert format_quantity(Quantity(-0.001, "s")) == "0 s"
