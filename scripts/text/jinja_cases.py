"""Jinja2 construct cases for bunsen's template engine: (name, template, context) triples.

make_template_goldens.py renders each with Python jinja2 in Hugging Face's environment and writes
tests/unit/text/data/jinja_constructs.jsonl; the C++ test renders the same cases and requires identical
output, or an error where jinja2 raised. Not expectations: the expected text always comes from jinja2.
Invariant: contexts are plain JSON (the C++ side reads them with key order kept).
"""

MSGS = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello!", "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]},
    {"role": "user", "content": "  padded  "},
]
DATA = {
    "n": 7, "f": 2.5, "neg": -3, "s": "Hello World", "e": "", "t": True, "no": False, "z": None,
    "l": [3, 1, 2], "ls": ["b", "A", "c", "a"], "d": {"b": 1, "a": 2, "c": None},
    "people": [{"name": "Ann", "age": 31, "tags": ["x"]}, {"name": "bob", "age": 25},
               {"name": "Cy", "age": 31, "tags": []}],
    "nested": {"k": [1, {"x": "y"}], "u": "ünï ✓ 😀"},
    "u": "naïve café 😀 日本語", "ws": "  \t a b \n c  \n", "msgs": MSGS,
}

CASES = []


def case(name, template, context=None):
    CASES.append((name, template, DATA if context is None else context))


# ---- literals and printing (Python str()/repr()) ----
for i, expr in enumerate([
    "1", "-1", "1.0", "0.5", "1e16", "1e15", "1.5e-5", "0.0001", "1e-4", "3.14159", "0.1 + 0.2", "1/3", "2/2",
    "-0.0", "1e308 * 10", "-(1e308 * 10)", "10 // 3", "-10 // 3", "10 % 3", "-10 % 3", "10 % -3", "7.5 // 2",
    "-7.5 % 2", "2 ** 10", "2 ** -1", "2 ** 0.5", "2 ** 3 ** 2", "-2 ** 2", "(-2) ** 2", "3 * 1.0", "True + 1",
    "True", "False", "None", "true", "none", "'a' 'b' \"c\"", "'it''s'", "\"it's\"", "'say \"hi\"'",
    "'both \\' and \"'", "'tab\\tnew\\nline'", "'\\x41\\u00e9\\U0001F600'", "'back\\\\slash'", "'\\q'",
    "[1, 'a', none, true, 1.5]", "(1,)", "()", "(1, 2)", "{'a': 1, 'b': [1, 2]}", "{}", "[]", "[[]]",
    "1, 2", "'x', none", "0x1F", "0o17", "0b101", "1_000", "1_000.5", "1e3", "12.5e-1", "[1, 2,]",
    "{'a': 1,}", "{1: 'int', 1.0: 'float', true: 'bool'}", "{(1, 2): 'tuple key'}",
    "['é', 'it\\'s', '\\x00\\x7f\\x85\\u200b\\u2028', '😀']", "'\\u00e9' == 'é'", "'😀'|length",
]):
    case(f"literal_{i}", "{{ " + expr + " }}")

case("print_data", "{{ l }}|{{ d }}|{{ nested }}|{{ people[0] }}|{{ z }}|{{ t }}|{{ f }}")
case("print_undefined", "[{{ missing }}][{{ missing is defined }}][{{ d.missing }}][{{ l[10] }}]")
case("print_unicode", "{{ u }}|{{ [u] }}|{{ {'k': u} }}")
case("string_filter_repr", "{{ d|string }}|{{ l|string }}|{{ (l ~ '') }}|{{ none|string }}|{{ 1.0|string }}")
case("concat_tilde", "{{ 1 ~ 'a' ~ none ~ true ~ 1.5 ~ [1] ~ {'a': 'b'} ~ missing }}")
case("string_repeat", "{{ 'ab' * 3 }}|{{ 3 * 'x' }}|{{ 'x' * 0 }}|{{ 'x' * -2 }}|{{ [1, 2] * 2 }}|{{ 'a' * true }}")
case("list_concat", "{{ [1] + [2, 3] }}|{{ (1,) + (2,) }}|{{ 'a' + 'b' }}")
case("err_add_str_int", "{{ 'a' + 1 }}")
case("err_add_list_tuple", "{{ [1] + (2,) }}")
case("err_div_zero", "{{ 1 / 0 }}")
case("err_floordiv_zero", "{{ 1 // 0 }}")
case("err_mod_zero", "{{ 1 % 0 }}")
case("err_undefined_add", "{{ missing + 1 }}")
case("err_undefined_attr", "{{ missing.attr }}")
case("err_undefined_item", "{{ missing['k'] }}")
case("err_undefined_call", "{{ missing() }}")
case("err_none_attr_call", "{{ z.strip() }}")
case("err_compare_types", "{{ 1 < 'a' }}")
case("err_concat_precedence", "{{ 'a' ~ 1 + 2 }}")
case("err_neg_string", "{{ -'a' }}")
case("err_call_int", "{{ n() }}")
case("percent_format", "{{ '%s and %d' % ('x', 3) }}|{{ '%05.2f' % 3.14159 }}|{{ '%-4s|' % 'ab' }}|{{ '%x %o %r' % (255, 8, 'q') }}|{{ '%(a)s' % {'a': 5} }}|{{ '100%%' % () }}")
case("err_percent_args", "{{ '%s %s' % ('a',) }}")

# ---- comparisons, logic, membership ----
case("compare_chain", "{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ (1, 2) == (1, 2) }} {{ [1] == (1,) }} {{ none == none }} {{ missing == missing }} {{ missing == none }} {{ true == 1 }}")
case("compare_ops", "{{ 2 >= 2 }} {{ 2 > 2 }} {{ 2 <= 1 }} {{ 2 != 3 }} {{ 'B' < 'a' }} {{ 'é' > 'z' }}")
case("logic_values", "{{ 0 or 'x' }}|{{ 'a' and 'b' }}|{{ '' and 'b' }}|{{ none or [] }}|{{ not 0 }}|{{ not 'a' }}|{{ missing or 'dflt' }}|{{ l and l[0] }}")
case("membership", "{{ 'ell' in s }} {{ 'x' not in s }} {{ 1 in l }} {{ 'a' in d }} {{ 'zz' in d }} {{ 2 in [1.0, 2.0] }} {{ 'a' in missing }} {{ [1] in [[1], 2] }}")
case("err_in_int", "{{ 1 in 5 }}")
case("err_int_in_string", "{{ 1 in 'abc' }}")
case("cond_expr", "{{ 'y' if t else 'n' }}|{{ 'y' if no else 'n' }}|{{ 'y' if no }}|{{ ('a' if t) ~ 'b' }}|{{ 1 if 0 else 2 if 0 else 3 }}")
case("precedence", "{{ 2 + 3 * 4 }} {{ (2 + 3) * 4 }} {{ 10 - 2 - 3 }} {{ 2 * 3 % 4 }} {{ not 1 == 2 }} {{ -2 + 3 }} {{ (1 + 2) ~ 3 }} {{ 1 or 2 and 0 }} {{ -1|abs }} {{ not none is none }} {{ 2 * -3 }} {{ 10 / 4 }} {{ 10 / 5 }}")

# ---- whitespace control ----
case("ws_trim_blocks", "{% if t %}\nyes\n{% endif %}\nafter")
case("ws_lstrip_blocks", "  {% if t %}\n    x\n  {% endif %}\n  tail")
case("ws_minus", "a  {%- if t -%}  b  {%- endif -%}  c\n\n{{- ' d ' -}}\n\n e")
case("ws_plus_disables", "  {%+ if t %}x{% endif +%}\n  y")
case("ws_var_not_lstripped", "  {{ 'v' }}\n  {% if t %}w{% endif %}")
case("ws_comment", "a\n  {# comment #}\nb {#- c -#} c\n{#+ d +#}\ne")
case("ws_raw", "{% raw %}{{ not evaluated }} {% if %}{% endraw %}|{%- raw -%}  x  {%- endraw -%}  |  {% raw %}\nkeep\n{% endraw %}\nend")
case("ws_trailing_newline", "line\n")
case("ws_two_trailing_newlines", "line\n\n")
case("ws_crlf", "a\r\nb\rc\n{% if t %}\r\nx\r\n{% endif %}\r\n")
case("ws_block_at_start", "    {% set x = 1 %}\n{{ x }}")
case("ws_inline_blocks", "a {% if t %}b{% endif %} c {% for i in l %}{{ i }} {% endfor %}d")
case("ws_nested_indent", "<ul>\n{% for p in people %}\n    <li>{{ p.name }}</li>\n{% endfor %}\n</ul>")
case("ws_minus_var_newlines", "{{- 'a' }}\n\n{{ 'b' -}}\n\n   {{ 'c' }}")
case("ws_unicode_space_strip", "x \u3000\u00a0 {{- 'y' -}} \u2003 z")
case("ws_dict_braces", "{{ {'a': {'b': 1}} }}|{{ {'a': {'b': 1}}['a'] }}")

# ---- if / for / loop ----
case("if_elif_else", "{% for v in [0, 1, 2, 3] %}{% if v == 0 %}zero{% elif v == 1 %}one{% elif v == 2 %}two{% else %}many{% endif %},{% endfor %}")
case("if_tuple_test", "{% if l, %}t{% endif %}")
case("for_loop_vars", "{% for x in ls %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }}/{{ loop.length }}/{{ loop.previtem }}/{{ loop.nextitem }}/{{ loop.depth }};{% endfor %}")
case("for_cycle_changed", "{% for p in people %}{{ loop.cycle('odd', 'even') }}{% if loop.changed(p.age) %}*{% endif %}{{ p.age }} {% endfor %}")
case("for_else", "{% for x in [] %}x{% else %}empty{% endfor %}|{% for x in l %}{{ x }}{% else %}no{% endfor %}|{% for x in missing %}m{% else %}undef{% endfor %}")
case("for_else_break_quirk", "{% for x in l %}{% break %}{% else %}else-ran{% endfor %}|{% for x in l %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% else %}else{% endfor %}")
case("for_else_continue_quirk", "{% for x in [1] %}{% continue %}{% else %}else-ran{% endfor %}")
case("for_if_filter", "{% for x in l if x > 1 %}{{ x }}:{{ loop.index }}/{{ loop.length }} {% endfor %}")
case("for_unpack", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for a, b in [[1, 2], 'xy', (3, 4)] %}{{ a }}{{ b }}{% endfor %}")
case("err_for_unpack_count", "{% for a, b in [[1, 2, 3]] %}{% endfor %}")
case("for_dict_keys", "{% for k in d %}{{ k }}{% endfor %}|{% for c in 'héllo' %}{{ c }}.{% endfor %}")
case("for_filter_in_iterable", "{% for x in l|sort %}{{ x }}{% endfor %}|{% for x in ls|map('upper')|reverse %}{{ x }}{% endfor %}")
case("for_nested_loop", "{% for a in [1, 2] %}{% for b in 'xy' %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}{{ loop.index }}|{% endfor %}")
case("for_break_continue", "{% for x in range(10) %}{% if x is odd %}{% continue %}{% endif %}{% if x > 6 %}{% break %}{% endif %}{{ x }}{% endfor %}")
case("for_recursive", "{% for item in [{'n': 'a', 'c': [{'n': 'b', 'c': [{'n': 'c', 'c': []}]}]}, {'n': 'd', 'c': []}] recursive %}{{ loop.depth }}{{ item.n }}[{{ loop(item.c) }}]{% endfor %}")
case("err_for_none", "{% for x in z %}{% endfor %}")
case("err_for_int", "{% for x in n %}{% endfor %}")
case("loop_scoping", "{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = x + i %}{{ x }} {% endfor %}{{ x }}")
case("loop_var_not_leaking", "{% for i in [1, 2] %}{% endfor %}{{ i }}|{{ i is defined }}")
case("loop_outside", "{{ loop }}|{{ loop is defined }}")
case("loop_length_messages", "{% for m in msgs %}{% if loop.last %}{{ loop.index0 }}:{{ m.role }}{% endif %}{% endfor %}")
case("loop_reversed_slice", "{% for m in msgs[::-1] %}{{ m.role[0] }}{% endfor %}|{% for m in msgs[1:3] %}{{ m.role }}{% endfor %}")
case("err_break_outside_loop", "{% break %}")
case("err_continue_in_macro_in_loop", "{% for x in l %}{% macro m() %}{% continue %}{% endmacro %}{% endfor %}")

# ---- set / namespace / with ----
case("set_basic", "{% set a = 1 %}{% set b, c = 2, 'x' %}{% set e = [a, b] %}{{ a }}{{ b }}{{ c }}{{ e }}")
case("set_block", "{% set body %}  Hi {{ s }}!  {% endset %}[{{ body }}]")
case("set_block_filter", "{% set body | upper | trim %}  hi there  {% endset %}[{{ body }}]")
case("set_in_if_visible", "{% if t %}{% set v = 'set' %}{% endif %}{{ v }}")
case("namespace", "{% set ns = namespace(count=0, items=[]) %}{% for x in l %}{% set ns.count = ns.count + x %}{% set ns.items = ns.items + [x] %}{% endfor %}{{ ns.count }} {{ ns.items }} {{ ns.missing }}")
case("namespace_dict_arg", "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}{{ ns['a'] }}")
case("namespace_repr", "{% set ns = namespace(a=1) %}{{ ns }}")
case("err_set_attr_non_namespace", "{% set d.x = 1 %}")
case("with_block", "{% with a = 1, b = s %}{{ a }}{{ b }}{% endwith %}[{{ a }}]")
case("with_scope_eval_order", "{% set a = 'outer' %}{% with a = 'inner', b = a %}{{ a }}-{{ b }}{% endwith %}")
case("set_tuple_swap", "{% set a, b = 1, 2 %}{% set a, b = b, a %}{{ a }}{{ b }}")
case("set_overrides_context", "{% set n = 'mine' %}{{ n }}")

# ---- macros / call / filter blocks ----
case("macro_defaults", "{% macro greet(name, greeting='Hello', punct='!') %}{{ greeting }}, {{ name }}{{ punct }}{% endmacro %}{{ greet('Ann') }}|{{ greet('Bob', 'Hi') }}|{{ greet(punct='?', name='Cy') }}|{{ greet() }}")
case("macro_varargs_kwargs", "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, x=4) }}")
case("err_macro_too_many_args", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}")
case("err_macro_unknown_kwarg", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(b=1) }}")
case("macro_caller", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold {{ s }}{% endcall %}")
case("macro_caller_args", "{% macro each(items) %}{% for i in items %}{{ caller(i, loop.index) }}{% endfor %}{% endmacro %}{% call(x, n) each(ls) %}[{{ n }}:{{ x }}]{% endcall %}")
case("macro_recursive", "{% macro fact(k) %}{% if k <= 1 %}1{% else %}{{ k * fact(k - 1)|int }}{% endif %}{% endmacro %}{{ fact(6) }}")
case("macro_closure_late_binding", "{% macro show() %}{{ late }}{% endmacro %}{% set late = 'bound' %}{{ show() }}")
case("macro_local_set", "{% macro m() %}{% set inner = 1 %}{{ inner }}{% endmacro %}{{ m() }}{{ inner }}")
case("macro_attrs", "{% macro m(a, b=1) %}{% endmacro %}{{ m.name }}|{{ m.arguments }}|{{ m is callable }}")
case("macro_output_is_string", "{% macro m() %} x {% endmacro %}[{{ m()|trim }}][{{ m()|length }}]")
case("macro_no_caller", "{% macro m() %}{{ caller is defined }}{% endmacro %}{{ m() }}")
case("filter_block", "{% filter upper %}hello {{ s }}{% endfilter %}|{% filter replace('a', 'o')|title %}banana split{% endfilter %}")
case("generation_block", "{% for m in msgs %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration %}{% else %}{{ m.role }}{% endif %};{% endfor %}")

# ---- tests ----
TEST_VALUES = ["n", "f", "s", "e", "t", "no", "z", "l", "d", "missing", "(1, 2)", "ls|map('upper')", "ns", "range"]
for i, v in enumerate(TEST_VALUES):
    case(f"tests_types_{i}", "{% set ns = namespace() %}" + "".join(
        "{{ (%s) is %s }}," % (v, t) for t in ["defined", "undefined", "none", "string", "number", "integer", "float",
                                              "mapping", "iterable", "sequence", "boolean", "true", "false", "callable",
                                              "escaped"]))
case("tests_numeric", "{{ 3 is odd }} {{ 4 is even }} {{ 3.0 is odd }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(2) }} {{ -3 is odd }}")
case("tests_compare", "{{ 1 is eq 1 }} {{ 'a' is equalto 'a' }} {{ 2 is ne 1 }} {{ 1 is lt 2 }} {{ 1 is lessthan 2 }} {{ 3 is gt 2 }} {{ 3 is greaterthan 4 }} {{ 2 is ge 2 }} {{ 2 is le 1 }}")
case("tests_in_sameas", "{{ 1 is in l }} {{ 'q' is in s }} {{ none is sameas none }} {{ true is sameas true }} {{ 1 is sameas 1 }} {{ l is sameas l }}")
case("tests_case", "{{ 'abc' is lower }} {{ 'aBc' is lower }} {{ 'ABC' is upper }} {{ '123' is upper }} {{ 'É' is upper }}")
case("tests_not_and_chain", "{{ not t is defined }} {{ missing is not defined and n is number }} {{ z is not none }}")
case("tests_filter_test_names", "{{ 'upper' is filter }} {{ 'nope' is filter }} {{ 'odd' is test }} {{ 'nope' is test }}")
case("tests_messages", "{{ msgs[0].role is defined }} {{ msgs[0].missing is defined }} {{ msgs[9] is defined }} {{ msgs[2].tool_calls is iterable }} {{ msgs[0].content is string }}")
case("err_unknown_test_toplevel", "{{ n is frobbed }}")
case("unknown_test_in_dead_branch", "{% if false %}{{ n is frobbed }}{% endif %}ok")
case("err_unknown_test_in_live_branch", "{% if true %}{{ n is frobbed }}{% endif %}")
case("err_odd_string", "{{ 'a' is odd }}")

# ---- filters ----
case("f_length_count", "{{ s|length }} {{ u|length }} {{ l|count }} {{ d|length }} {{ missing|length }} {{ e|length }} {{ (1, 2)|length }}")
case("err_length_int", "{{ n|length }}")
case("err_length_generator", "{{ l|map('string')|length }}")
case("f_case", "{{ s|upper }} {{ s|lower }} {{ 'hELLO wORLD'|capitalize }} {{ 'hello   big-world(x)[y]{z}<w> o\\'neil'|title }} {{ 'straße'|upper }} {{ n|upper }} {{ none|lower }} {{ missing|upper }}[{{ 'ǆ ǳ'|title }}]")
case("f_trim", "[{{ ws|trim }}][{{ 'xxhixx'|trim('x') }}][{{ '\\u3000 wide \\u00a0'|trim }}][{{ n|trim }}]")
case("f_replace", "{{ s|replace('l', 'L') }} {{ s|replace('l', 'L', 2) }} {{ 'ab'|replace('', '-') }} {{ n|replace('7', 'seven') }}")
case("f_join", "{{ l|join }} {{ l|join(', ') }} {{ [1, none, true, 'x', [2]]|join('|') }} {{ people|join('/', attribute='name') }} {{ 'abc'|join('.') }} {{ d|join(',') }}")
case("f_first_last", "{{ l|first }} {{ l|last }} {{ s|first }} {{ s|last }} {{ d|first }} {{ []|first }}|{{ missing|first }}|{{ ls|map('lower')|first }}")
case("err_last_generator", "{{ l|map('string')|last }}")
case("f_default", "{{ missing|default('dflt') }} {{ missing|d('d') }} {{ z|default('x') }} {{ e|default('empty', true) }} {{ 0|default(5, boolean=true) }} {{ missing|default }}| {{ d.missing|default([1]) }}")
case("f_tojson_basic", "{{ nested|tojson }}|{{ l|tojson }}|{{ 'a\"b\\\\c\\n\\t\\x01\\x7f'|tojson }}|{{ none|tojson }}|{{ t|tojson }}|{{ f|tojson }}|{{ 1.0|tojson }}|{{ u|tojson }}")
case("f_tojson_indent", "{{ d|tojson(indent=2) }}|{{ people|tojson(indent=4) }}|{{ [[], {}]|tojson(indent=1) }}|{{ {'a': [1]}|tojson(indent='--') }}|{{ {'a': 1}|tojson(indent=0) }}")
case("f_tojson_options", "{{ d|tojson(sort_keys=true) }}|{{ d|tojson(separators=(',', ':')) }}|{{ u|tojson(ensure_ascii=true) }}|{{ d|tojson(true) }}|{{ {1: 'a', true: 'b', none: 'c', 1.5: 'd'}|tojson }}")
case("f_tojson_floats", "{{ [1e16, 1.5e-7, -0.0, 0.1, 100.0, 123456789012345.6]|tojson }}")
case("err_tojson_undefined", "{{ missing|tojson }}")
case("err_tojson_namespace", "{{ namespace(a=1)|tojson }}")
case("f_items_list", "{{ d|items|list }} {{ d|list }} {{ s|list }} {{ (1, 2)|list }} {{ missing|items|list }}")
case("f_string_int_float", "{{ '42'|int }} {{ '42.9'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ '0x1A'|int(base=16) }} {{ 3.99|int }} {{ true|int }} {{ none|int }} {{ ' 12 '|int }} {{ '1_000'|int }} {{ '-5'|int }}")
case("f_float", "{{ '3.5'|float }} {{ 3|float }} {{ 'x'|float }} {{ 'x'|float(1.5) }} {{ ' 1e3 '|float }} {{ 'inf'|float }} {{ none|float }} {{ true|float }}")
case("f_abs_round", "{{ -3|abs }} {{ -2.5|abs }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 1.2345|round(2, 'floor') }} {{ 1.2345|round(1, 'ceil') }} {{ 7|round }} {{ -0.5|round }} {{ 1234|round(-2) }} {{ 1250.0|round(-2) }}")
case("f_map", "{{ ls|map('upper')|list }} {{ people|map(attribute='name')|list }} {{ people|map(attribute='tags', default='none')|list }} {{ l|map('string')|join }} {{ ['a,b', 'c']|map('replace', ',', ';')|list }}")
case("f_select_reject", "{{ range(10)|select('odd')|list }} {{ range(10)|reject('odd')|list }} {{ [0, 1, '', 'a', none]|select|list }} {{ [0, 1, '', 'a']|reject|list }} {{ l|select('gt', 1)|list }} {{ ls|select('in', ['a', 'b'])|list }}")
case("f_selectattr", "{{ people|selectattr('age', 'equalto', 31)|map(attribute='name')|list }} {{ people|rejectattr('tags')|map(attribute='name')|list }} {{ people|selectattr('tags', 'defined')|map(attribute='name')|join(',') }} {{ msgs|selectattr('role', 'eq', 'user')|list|length }}")
case("f_generator_truthy", "{% if []|select %}truthy{% else %}falsy{% endif %}|{{ (l|select('gt', 100)) is iterable }}|{{ (l|select) is sequence }}")
case("f_unique", "{{ ls|unique|list }} {{ ls|unique(case_sensitive=true)|list }} {{ people|unique(attribute='age')|map(attribute='name')|list }} {{ [1, 1.0, true, 2]|unique|list }}")
case("f_dictsort", "{{ d|dictsort }} {{ {'b': 1, 'A': 2, 'a': 3}|dictsort }} {{ {'b': 1, 'A': 2, 'a': 3}|dictsort(true) }} {{ {'x': 2, 'y': 1}|dictsort(by='value') }} {{ d|dictsort(reverse=true) }}")
case("err_dictsort_none_value", "{{ d|dictsort(by='value') }}")
case("f_sort", "{{ l|sort }} {{ ls|sort }} {{ ls|sort(case_sensitive=true) }} {{ ls|sort(reverse=true) }} {{ people|sort(attribute='age')|map(attribute='name')|list }} {{ people|sort(attribute='age,name')|map(attribute='name')|list }} {{ 'cab'|sort }} {{ [2.5, 1, true]|sort }}")
case("err_sort_mixed", "{{ [1, 'a']|sort }}")
case("f_reverse", "{{ s|reverse }} {{ l|reverse|list }} {{ u|reverse }} {{ d|reverse|list }} {{ (l|map('string'))|reverse }}")
case("f_min_max_sum", "{{ l|min }} {{ l|max }} {{ ls|min }} {{ ls|max }} {{ ls|max(case_sensitive=true) }} {{ people|min(attribute='age') }} {{ []|max }}|{{ l|sum }} {{ people|sum(attribute='age') }} {{ l|sum(start=10) }} {{ ([0.1] * 10)|sum }} {{ [0.1, 0.2, 0.3]|sum }} {{ [1, 2.5, true]|sum }} {{ [[1], [2]]|sum(start=[]) }}")
case("f_batch_slice", "{{ range(7)|batch(3)|list }} {{ range(7)|batch(3, 'x')|list }} {{ range(7)|slice(3)|list }} {{ range(7)|slice(3, 0)|list }}")
case("f_indent", "[{{ 'a\\nb\\n\\nc'|indent }}][{{ 'a\\nb'|indent(2, true) }}][{{ 'a\\n\\nb'|indent(2, blank=true) }}][{{ 'a\\nb'|indent('> ') }}][{{ 'x'|indent }}]")
case("f_wordcount_center", "{{ 'Hello, big wide world!'|wordcount }} {{ 'naïve café_x 42'|wordcount }} [{{ 'ab'|center(6) }}] [{{ 'abc'|center(6) }}]")
case("f_safe_escape", "{{ '<b>'|escape }} {{ '<b>'|e }} {{ ('<b>'|safe)|escape }} {{ '<a href=\"x\">&\\''|forceescape }} {{ ('<i>'|safe) + '<b>' }} {{ '<b>' ~ ('<i>'|safe) }}")
case("f_format", "{{ '%s-%s'|format('a', 1) }} {{ '%(x)s!'|format(x='y') }} {{ '%.3f'|format(2) }} {{ '%5d|'|format(42) }}")
case("f_truncate", "{{ 'Hello world this is long'|truncate(11) }}|{{ 'Hello world this is long'|truncate(11, true) }}|{{ 'Hello world'|truncate(9, leeway=0) }}|{{ 'short'|truncate(10) }}|{{ 'Hello world this'|truncate(12, false, '..', 0) }}")
case("f_attr", "{{ d|attr('b') }}|{{ d|attr('items') is callable }}|{{ s|attr('upper') is callable }}")
case("f_chained", "{{ msgs|map(attribute='role')|unique|sort|join(', ') }}|{{ (people|map(attribute='age')|sum) / 3 }}|{{ s|lower|replace('o', '0')|title|reverse }}")
case("err_unknown_filter_toplevel", "{{ n|frobnicate }}")
case("unknown_filter_in_dead_branch", "{% if false %}{{ n|frobnicate }}{% endif %}ok{{ 'y' if t else n|frobnicate }}")
case("err_unknown_filter_in_for_body", "{% for x in [] %}{{ x|frobnicate }}{% endfor %}")
case("err_unknown_filter_map_runtime", "{{ l|map('frobnicate')|list }}")

# ---- methods ----
case("m_strip", "[{{ ws.strip() }}][{{ ws.lstrip() }}][{{ ws.rstrip() }}][{{ '--x--'.strip('-') }}][{{ 'xyhixy'.strip('yx') }}][{{ '\\n\\nA\\n'.lstrip('\\n') }}]")
case("m_split", "{{ s.split() }} {{ ws.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a,b,c'.split(',', 1) }} {{ 'a b c'.rsplit(' ', 1) }} {{ '  a  b  '.split(none, 1) }} {{ '  a  b  '.rsplit(none, 1) }} {{ ''.split() }} {{ ''.split(',') }} {{ 'x</think>y</think>z'.split('</think>')[-1] }}")
case("err_split_empty_sep", "{{ 'abc'.split('') }}")
case("m_splitlines", "{{ 'a\\nb\\r\\nc\\rd\\x0be\\u2028f'.splitlines() }} {{ 'a\\nb\\n'.splitlines(true) }}")
case("m_startswith", "{{ s.startswith('Hell') }} {{ s.endswith('World') }} {{ s.startswith(('x', 'He')) }} {{ s.endswith('o', 0, 5) }} {{ s.startswith('World', 6) }} {{ ''.startswith('') }}")
case("m_replace_find", "{{ s.replace('o', '0') }} {{ s.replace('o', '0', 1) }} {{ s.find('o') }} {{ s.rfind('o') }} {{ s.find('z') }} {{ s.index('W') }} {{ s.count('l') }} {{ u.find('café') }} {{ s.find('o', 5) }}")
case("err_index_missing", "{{ s.index('z') }}")
case("m_case", "{{ s.upper() }} {{ s.lower() }} {{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }} {{ 'AbC'.swapcase() }} {{ \"they're bill's\".title() }}")
case("m_predicates", "{{ '123'.isdigit() }} {{ 'abc'.isalpha() }} {{ 'ab1'.isalnum() }} {{ '  '.isspace() }} {{ 'abc'.islower() }} {{ 'ABC'.isupper() }} {{ ''.isdigit() }} {{ 'Ab'.istitle() }}")
case("m_join_format", "{{ ', '.join(ls) }} {{ '-'.join('abc') }} {{ '{} + {} = {}'.format(1, 2, 3) }} {{ '{0}{1}{0}'.format('a', 'b') }} {{ '{name}!'.format(name='x') }} {{ '{:>5}|{:<5}|{:^5}|'.format('a', 'b', 'c') }} {{ '{:.2f} {:03d} {!r}'.format(3.14159, 7, 'q') }}")
case("err_join_non_str", "{{ ', '.join(l) }}")
case("m_misc_str", "{{ 'ab'.center(6, '*') }} {{ 'ab'.ljust(4, '.') }} {{ 'ab'.rjust(4) }} {{ '42'.zfill(5) }} {{ '-42'.zfill(5) }} {{ 'a=b=c'.partition('=') }} {{ 'a=b=c'.rpartition('=') }} {{ 'prefix_x'.removeprefix('prefix_') }} {{ 'x.py'.removesuffix('.py') }}")
case("m_dict", "{{ d.get('a') }} {{ d.get('zz') }} {{ d.get('zz', 'dflt') }} {{ d.keys()|list }} {{ d.values()|list }} {{ d.items()|list }} {{ msgs[2].get('tool_calls')[0].function.arguments }}")
case("m_dict_method_shadow", "{{ {'items': 1, 'x': 2}.items()|list }} {{ {'items': 1}['items'] }} {{ {'keys': 5}.keys is callable }}")
case("m_list", "{{ l.index(2) }} {{ l.count(1) }} {{ ls.copy() }} {{ (1, 2, 1).count(1) }}")
case("err_list_append_unsafe", "{{ l.append(4) }}")
case("err_dict_update_unsafe", "{{ d.update({'x': 1}) }}")
case("m_list_append_in_set", "{% set _ = l.append(4) %}{{ l }}")
case("m_chained_qwen", "{% set c = '<think>\\nreason\\n</think>\\n\\nanswer' %}{{ c.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}|{{ c.split('</think>')[-1].lstrip('\\n') }}")

# ---- subscripts, slices, attributes ----
case("subscript", "{{ l[0] }} {{ l[-1] }} {{ l[5] }}|{{ s[0] }} {{ s[-1] }} {{ u[-1] }} {{ d['a'] }} {{ d.a }} {{ people[1].name }} {{ people[1]['name'] }} {{ nested.k[1].x }} {{ l.1 }} {{ msgs.0.role }}")
case("slices", "{{ l[1:] }} {{ l[:-1] }} {{ l[::-1] }} {{ l[::2] }} {{ s[1:4] }} {{ s[::-1] }} {{ s[-3:] }} {{ s[10:2:-2] }} {{ u[::-1] }} {{ l[5:] }} {{ l[-100:100] }} {{ (1, 2, 3)[1:] }} {{ s[none:2] }}")
case("err_slice_none", "{{ z[1:] }}")
case("err_slice_step_zero", "{{ l[::0] }}")
case("err_slice_undefined", "{{ missing[1:] }}")
case("getattr_vs_getitem", "{{ d['items'] is callable }} {{ s['upper'] is callable }} {{ l['x'] }}|{{ n.real }} {{ f.imag }} {{ s.nope }}|")

# ---- globals ----
case("g_range", "{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(5, 0, -2)|list }} {{ range(0)|list }} {% for i in range(3) %}{{ i }}{% endfor %}")
case("err_range_too_big", "{{ range(200000)|length }}")
case("g_dict", "{{ dict(a=1, b=2) }} {{ dict() }} {{ dict([('x', 1)]) }}")
case("g_joiner_cycler", "{% set j = joiner(', ') %}{% for x in l %}{{ j() }}{{ x }}{% endfor %}|{% set c = cycler('a', 'b') %}{{ c.next() }}{{ c.next() }}{{ c.next() }}{{ c.current }}")
case("g_raise_exception", "{% if n > 5 %}{{ raise_exception('n too big: ' ~ n) }}{% endif %}")
case("g_raise_not_called", "{% if n < 5 %}{{ raise_exception('no') }}{% endif %}ok")
case("g_context_overrides_global", "{{ range }}", {"range": "mine"})

# ---- syntax errors ----
for i, bad in enumerate([
    "{% if x %}", "{% for x in l %}", "{% endif %}", "{{ x ", "{% frob %}", "{{ x | }}", "{{ (1, 2 }}", "{{ [1, 2 }}",
    "{% set %}", "{% set 1 = 2 %}", "{% macro m(a=1, b) %}{% endmacro %}", "{{ 'unterminated }}", "{# no end",
    "{% raw %}no end", "{{ x is }}", "{{ 1 +* 2 }}", "{% for x in %}{% endfor %}", "{{ }}", "{% if %}{% endif %}",
    "{% do x %}", "{{ a.'b' }}", "{% call m %}{% endcall %}", "{{ x is is y }}", "{% for %}", "{{ 1 2 }}",
    "{% set x = 1 %}{% endset %}", "{{ x }}}", "{{ ) }}", "{% endfor %}", "{% else %}", "{{ 007 }}",
    "{% if a %}{% elif %}{% endif %}",
]):
    case(f"syntax_error_{i}", bad)

# ---- unsupported-but-parsed tags fail at render ----
case("include_not_executed", "{% if false %}{% include 'x.j2' %}{% endif %}fine")
case("err_include_executed", "{% include 'x.j2' %}")

# ---- real-template idioms ----
case("idiom_system_split", "{% if msgs[0]['role'] == 'system' %}{% set sys = msgs[0]['content'] %}{% set rest = msgs[1:] %}{% else %}{% set sys = '' %}{% set rest = msgs %}{% endif %}[{{ sys }}]{% for m in rest %}<{{ m['role'] }}>{{ m['content']|trim }}{% endfor %}")
case("idiom_tool_args", "{% for m in msgs %}{% if m.tool_calls %}{% for tc in m.tool_calls %}{% set tc = tc.function if tc.function else tc %}{{ tc.name }}({{ tc.arguments|tojson }}){{ tc.arguments is mapping }}{% endfor %}{% endif %}{% endfor %}")
case("idiom_last_user_index", "{% set ns = namespace(idx=-1) %}{% for m in msgs %}{% if m.role == 'user' %}{% set ns.idx = loop.index0 %}{% endif %}{% endfor %}{{ ns.idx }}")
case("idiom_content_parts", "{% set c = [{'type': 'text', 'text': 'a'}, {'type': 'image'}, {'type': 'text', 'text': 'b'}] %}{% for p in c %}{% if p['type'] == 'text' %}{{ p['text'] }}{% elif p.type == 'image' %}<img>{% endif %}{% endfor %}|{{ c|selectattr('type', 'equalto', 'text')|map(attribute='text')|join(' ') }}")
case("idiom_strftime_defined", "{{ strftime_now is defined }} {{ raise_exception is callable }}")
case("idiom_bos_eos", "{{ bos_token }}x{{ eos_token }}", {"bos_token": "<s>", "eos_token": "</s>"})
case("idiom_enable_thinking", "{% if enable_thinking is defined and enable_thinking is false %}off{% else %}on{% endif %}", {"enable_thinking": False})
case("idiom_enable_thinking_absent", "{% if enable_thinking is defined and enable_thinking is false %}off{% else %}on{% endif %}", {})

# ---- more edge cases ----
case("err_infinite_macro_recursion", "{% macro r(k) %}{{ r(k + 1) }}{% endmacro %}{{ r(0) }}")
case("unicode_identifier", "{% set café = 'ok' %}{{ café }}")
case("percent_more", "{{ '%s' % none }}|{{ '%d' % 3.7 }}|{{ '%.2e' % 12345.678 }}|{{ '%g' % 0.0001 }}|{{ '%c' % 65 }}|{{ '%+d %+d' % (5, -5) }}|{{ '%#x %#o' % (255, 8) }}|{{ '%s' % [1, 'a'] }}|{{ '%s' % ((1, 2),) }}|{{ '%5.1f|%-6.2f|' % (3.14159, 2.5) }}")
case("str_format_more", "{{ '{:,}'.format(1234567) }} {{ '{:x}'.format(255) }} {{ '{:e}'.format(12345.678) }} {{ '{:%}'.format(0.25) }} {{ '{:*^9}'.format('mid') }} {{ '{:+.1f}'.format(2.25) }} {{ '{0[0]}{1[k]}'.format(l, {'k': 'v'}) }} {{ '{}'.format(none) }} {{ '{:5}|'.format(42) }}")
case("floats_printing", "{{ [1.0, 2.50, 1e-10, 123456789.123, 1e22, 5e-324] }} {{ 1e400 }} {{ -1e400 }} {{ 0.1 * 3 }} {{ 1/3 * 3 }} {{ 2 ** 0.5 }} {{ 100.0 }} {{ 1e16 + 1 }}")
case("tuple_ops", "{{ (1, 2) + (3,) }} {{ (1, 2) * 2 }} {{ (1,) < (2,) }} {{ ((1, 'a'),) }}")
case("none_attr_undefined", "[{{ z.a }}][{{ z.a is defined }}][{{ z['a'] }}][{{ n.foo }}][{{ s.foo is defined }}]")
case("loop_prev_next_edges", "{% for x in 'ab' %}[{{ loop.previtem }}|{{ loop.nextitem }}|{{ loop.previtem is defined }}]{% endfor %}")
case("loop_changed_noarg", "{% for x in [1, 1, 2] %}{{ loop.changed() }}{{ loop.changed(x) }} {% endfor %}")
case("err_loop_cycle_empty", "{% for x in l %}{{ loop.cycle() }}{% endfor %}")
case("for_dictsort_unpack", "{% for k, v in d|dictsort %}{{ k }}:{{ v }} {% endfor %}|{% for k, v in {'b': 2, 'a': 1}.items()|sort %}{{ k }}{{ v }}{% endfor %}")
case("map_int_sum", "{{ ['1', '2', 'x']|map('int')|sum }} {{ ls|map('upper')|first }} {{ range(3)|reverse|list }} {{ [1, 2, 3]|batch(2)|list|length }}")
case("title_apostrophes", "{{ \"o'neil mcdonald\"|title }} {{ 'a-b c_d'|title }} {{ \"o'neil mcdonald\".title() }} {{ 'ǆemal ǳ'.title() }} {{ 'ß'.upper() }} {{ 'ﬁne'.upper() }} {{ 'İ'.lower()|length }}")
case("markup_ops", "{{ ('<b>'|safe)|upper }} {{ ('<b>'|safe)|length }} {{ ('a'|safe) ~ '<' }} {{ ('<x>'|safe) is escaped }} {{ '<x>' is escaped }} {{ ('a'|safe).strip() }} {{ ['<'|safe] }}")
case("data_escapes", "{{ '\\n' }}|{{ '\\\\' }}|{{ \"\\\"\" }}|{{ 'a\\\nb' }}")
case("whitespace_interplay", "<a>\n  {%- if t %}\n    x\n  {%- endif %}\n</a>\n  {% for i in l -%}\n    {{ i }}\n  {%- endfor %}\nend")
case("whitespace_lstrip_after_trim", "{% if t %}\n  {% if t %}\n  inner\n  {% endif %}\n{% endif %}\n  {# c #}\n  x")
case("comment_in_loop_and_minus", "{% for i in l %}{# skip #}{{ i }}{#- -#} {% endfor %}")
case("dict_literal_nested_output", "{{ {'a': {'b': {'c': [1, {'d': none}]}}} }}")
case("set_tuple_from_split", "{% set a, b = 'k=v'.split('=') %}{{ b }}{{ a }}")
case("if_undefined_attr_chain_guard", "{% if msgs[0].missing is defined and msgs[0].missing.x %}bad{% else %}ok{% endif %}")
case("in_operator_dict_values", "{{ 'Be brief.' in msgs|map(attribute='content')|list }} {{ 'user' in msgs|map(attribute='role') }}")
case("string_comparison_unicode", "{{ 'é' < 'f' }} {{ 'Z' < 'a' }} {{ 'abc' < 'abd' }} {{ '' < 'a' }} {{ ['é'] < ['z'] }}")
case("int_filter_edge", "{{ '0b101'|int(base=2) }} {{ '0o17'|int(0, 8) }} {{ '1e2'|int }} {{ 'nan'|int }} {{ '  -0 '|int }} {{ 1.5e18|int }}")
case("round_edge", "{{ 0.5|round }} {{ 1.5|round }} {{ -1.5|round }} {{ 2.5|round(0, 'floor') }} {{ 0.125|round(2) }} {{ 0.375|round(2) }} {{ 1e20|round(2) }} {{ 5|round(2, 'ceil') }}")
case("sum_int_float_mix", "{{ [1, 2]|sum }} {{ [1, 0.5, 2]|sum }} {{ [0.5, 1, true]|sum }} {{ [1e100, 1.0, -1e100]|sum }} {{ []|sum }} {{ []|sum(start=0.5) }}")
case("err_sum_strings", "{{ ['a', 'b']|sum }}")
case("err_sum_start_string", "{{ [1]|sum(start='x') }}")
case("tojson_key_types", "{{ {'z': 1, 'a': {'y': [], 'b': {}}}|tojson(sort_keys=true, indent=2) }}|{{ [none, true, 'x', 1.5]|tojson(separators=('; ', '= ')) }}|{{ {'k': 'v'}|tojson(indent=true) }}")
case("err_tojson_mixed_sort", "{{ {1: 'a', 'b': 2}|tojson(sort_keys=true) }}")
case("err_tojson_tuple_key", "{{ {(1,): 'a'}|tojson }}")
case("tojson_tuple_and_markup", "{{ (1, 'a')|tojson }} {{ ('<b>'|safe)|tojson }} {{ 'é\\u2028'|tojson(ensure_ascii=true) }}")
case("attr_int_index", "{{ people.0.name }} {{ people[-1]['tags'] }} {{ nested.k.1.x }} {{ msgs[2].tool_calls[0]['function']['arguments']['a'] }}")
case("getitem_float_key", "[{{ l[1.0] }}][{{ {1: 'one'}[1.0] }}][{{ {1: 'one'}[true] }}][{{ d[[1]] }}]")

# ---- scoping and control-flow corners ----
case("scope_if_assigns_outer", "{% set x = 1 %}{% if true %}{% set x = 2 %}{% endif %}{{ x }}")
case("scope_loop_set_hides_nothing", "{% for i in [1] %}{% set n = 5 %}{% endfor %}{{ n }}")
case("scope_macro_no_caller_loop", "{% macro m() %}[{{ i }}]{% endmacro %}{% for i in [1, 2] %}{{ m() }}{% endfor %}")
case("scope_macro_in_loop", "{% for i in [1, 2] %}{% macro m() %}{{ i }}{% endmacro %}{{ m() }}{% endfor %}")
case("scope_macro_late_binding", "{% set x = 1 %}{% macro m() %}{{ x }}{% endmacro %}{% set x = 2 %}{{ m() }}")
case("scope_with_set", "{% with %}{% set y = 1 %}{{ y }}{% endwith %}[{{ y }}]")
case("scope_filter_block_set", "{% filter upper %}{% set y = 'in' %}{{ y }}{% endfilter %}[{{ y }}]")
case("scope_macro_sets_namespace", "{% set ns = namespace(a=1) %}{% macro m() %}{% set ns.a = 5 %}{% endmacro %}{{ m() }}{{ ns.a }}")
case("scope_iterable_evaluated_once", "{% set l2 = [1, 2] %}{% for x in l2 %}{% set l2 = [9] %}{{ x }}{% endfor %}{{ l2 }}")
case("loop_in_for_filter_refers_outer", "{% for a in [1, 2] %}{% for b in [1, 2, 3] if b != loop.index %}{{ b }}{% endfor %};{% endfor %}")
case("err_loop_in_macro", "{% macro m() %}{{ loop.index }}{% endmacro %}{% for x in [1] %}{{ m() }}{% endfor %}")
case("call_block_defaults", "{% macro m() %}{{ caller('a') }}|{{ caller('a', 'b') }}{% endmacro %}{% call(x, y='d') m() %}{{ x }}{{ y }}{% endcall %}")
case("err_caller_missing", "{% macro m() %}{{ caller() }}{% endmacro %}{{ m() }}")
case("map_filter_args", "{{ [[1, 2], [3]]|map('join', '-')|list }} {{ [none, 'x']|map('default', 'd')|list }} {{ [1, none]|select('none')|list }} {{ people|selectattr('tags', 'undefined')|map(attribute='name')|list }}")
case("ws_raw_variants", "a\n{%- raw %} r1 {% endraw %}\n{% raw -%}\n r2 \n{%- endraw %}\nb {%+ raw %}\nr3\n{% endraw +%}\nc\n  {% raw %}x{% endraw %}")
case("err_ws_raw_plus_end", "{% raw +%}x{% endraw %}")
case("ws_trim_one_newline", "{% if t %}\n\nx{% endif %}\n\ny")
case("ws_multiline_comment", "a\n{# line1\n   line2 #}\nb\n  {#- x #}  c")
case("ws_tabs_lstrip", "\t\t{% if t %}\n\tx\n\t{% endif %}\n")
case("ws_line_statement_literal", "# for x in l\n## comment\n{{ 1 }}")
case("ws_var_only_line", "  {{ 'v' }}  \n  {%- if t %} w{% endif %}")
case("ws_block_then_text_same_line", "{% if t %}  x  {% endif %}  y  ")
case("ws_nested_minus_everything", "{%- for i in l -%}\n  {{- i -}}\n{%- endfor -%}")
case("str_format_bool_none", "{{ '{}|{:>5}|{:d}'.format(true, true, false) }}")
case("err_str_format_none_spec", "{{ '{:>6}'.format(none) }}")
case("object_reprs", "{% macro m() %}{% endmacro %}{{ m }}|{{ [missing] }}|{% for x in 'ab' %}{{ loop }}{% endfor %}|{% set ns = namespace(a=[1], b={'c': none}) %}{{ ns }}|{% set ns.me = ns %}{{ ns }}")
case("caller_repr", "{% macro w() %}{{ caller }}{% endmacro %}{% call w() %}x{% endcall %}")
case("attr_filter_missing", "[{{ d|attr('nope') }}][{{ (d|attr('nope')) is defined }}]")
case("idiom_misc", "{{ msgs|selectattr('role', 'equalto', 'system')|list|first }}|{{ s[0].text }}|{{ msgs[-1].role }}|{{ msgs[3]['content']|trim + '!' }}|{{ msgs[0].content|length > 3 }}|{{ 'a' if no else 'b'|upper }}")
case("err_sort_missing_attribute", "{{ people|sort(attribute='tags')|list }}")
