import pytest

from tinytemplate import Template, TemplateError, render


def test_plain_text():
    assert render("hello") == "hello"


def test_variable():
    assert render("hi {{ name }}!", name="Ann") == "hi Ann!"


def test_missing_variable_is_empty():
    assert render("[{{ nope }}]") == "[]"


def test_dotted_dict_and_attr():
    class U:
        email = "a@b"

    assert render("{{ u.name }} {{ v.email }}", u={"name": "Bo"}, v=U()) == "Bo a@b"


def test_list_index():
    assert render("{{ xs.1 }}{{ xs.-1 }}", xs=["a", "b", "c"]) == "bc"


def test_list_index_out_of_range():
    assert render("[{{ xs.5 }}]", xs=["a"]) == "[]"


def test_filters_chain():
    assert render("{{ name|strip|upper }}", name="  ann ") == "ANN"


def test_title_filter():
    assert render("{{ s|title }}", s="hello big world") == "Hello Big World"


def test_length_first_last_join():
    xs = ["x", "y", "z"]
    assert render("{{ xs|length }} {{ xs|first }} {{ xs|last }} {{ xs|join }}", xs=xs) == "3 x z x, y, z"


def test_first_of_empty():
    assert render("[{{ xs|first }}]", xs=[]) == "[]"


def test_unknown_filter():
    with pytest.raises(TemplateError):
        render("{{ x|shout }}", x=1)


def test_escaping():
    assert render("{{ s }}", s="<b>&") == "&lt;b&gt;&amp;"


def test_safe_disables_escaping():
    assert render("{{ s|safe }}", s="<b>") == "<b>"


def test_autoescape_off():
    assert Template("{{ s }}", autoescape=False).render(s="<i>") == "<i>"


def test_literals():
    assert render("{{ 'x'|upper }}{{ 42 }}") == "X42"


def test_if_true_false():
    t = "{% if ok %}yes{% else %}no{% endif %}"
    assert render(t, ok=True) == "yes"
    assert render(t, ok=False) == "no"
    assert render(t) == "no"


def test_if_not():
    assert render("{% if not items %}empty{% endif %}", items=[]) == "empty"


def test_if_equality():
    t = "{% if role == 'admin' %}A{% else %}U{% endif %}"
    assert render(t, role="admin") == "A"
    assert render(t, role="guest") == "U"


def test_if_inequality():
    assert render("{% if n != 3 %}x{% endif %}", n=4) == "x"
    assert render("{% if n != 3 %}x{% endif %}", n=3) == ""


def test_for_loop():
    assert render("{% for x in xs %}<{{ x }}>{% endfor %}", xs=[1, 2]) == "<1><2>"


def test_for_else():
    assert render("{% for x in xs %}{{ x }}{% else %}none{% endfor %}", xs=[]) == "none"


def test_loop_variables():
    t = "{% for x in xs %}{{ loop.index }}{% if loop.first %}F{% endif %}{% if loop.last %}L{% endif %} {% endfor %}"
    assert render(t, xs="abc") == "1F 2 3L "


def test_loop_index0():
    assert render("{% for x in xs %}{{ loop.index0 }}{% endfor %}", xs=[7, 8]) == "01"


def test_loop_scope_does_not_leak():
    assert render("{% for x in xs %}{% endfor %}[{{ x }}]", xs=[1]) == "[]"


def test_nested_blocks():
    t = "{% for r in rows %}{% if r.on %}{{ r.n }}{% endif %}{% endfor %}"
    assert render(t, rows=[{"n": 1, "on": True}, {"n": 2, "on": False}, {"n": 3, "on": True}]) == "13"


def test_unclosed_block():
    with pytest.raises(TemplateError):
        Template("{% if x %}open")


def test_mismatched_end():
    with pytest.raises(TemplateError):
        Template("{% if x %}a{% endfor %}")


def test_bad_for_syntax():
    with pytest.raises(TemplateError):
        Template("{% for x of xs %}{% endfor %}")


def test_unknown_tag():
    with pytest.raises(TemplateError):
        Template("{% while x %}")


def test_stray_else():
    with pytest.raises(TemplateError):
        Template("{% else %}")


def test_none_renders_empty():
    assert render("[{{ v }}]", v=None) == "[]"
