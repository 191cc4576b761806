// jinja2's sequence filters (length, first, last, join, list, reverse, sort, dictsort, unique, min,
// max, sum, map, select/reject(attr), batch, slice, items). map/select/reject/selectattr/rejectattr/
// unique/batch/slice/items return generators and reverse an iterator, as in jinja2 (always truthy,
// no length, iterable once). sum() reproduces CPython 3.12 exactly, compensated float summation included.
#include <algorithm>
#include <cmath>

#include "core/status.h"
#include "text/jinja/filters_impl.h"
#include "text/jinja/operators.h"
#include "text/jinja/py_str.h"

namespace bunsen::text::jinja::filters {

AttrGetter::AttrGetter(const std::optional<Value>& attribute, bool lower_strings, std::optional<Value> def)
    : default_value(std::move(def)), lower(lower_strings) {
  if (!attribute || attribute->is_none()) return;
  if (!attribute->is_string()) {
    parts.push_back(*attribute);
    return;
  }
  for (const std::string& p : py::split(attribute->str(), std::string("."), -1)) {
    const bool digits = !p.empty() && p.find_first_not_of("0123456789") == std::string::npos;
    parts.push_back(digits && p.size() < 18 ? Value::integer(std::stoll(p)) : Value::string(p));
  }
}

Value AttrGetter::operator()(Interpreter& in, const Value& item) const {
  Value v = item;
  for (const Value& p : parts) {
    v = in.getitem(v, p);
    if (default_value && !default_value->is_none() && v.is_undefined()) v = *default_value;
  }
  return lower ? ignore_case(v) : v;
}

namespace {

bool bool_arg(ArgReader& r, size_t i, const char* name) { return truthy(r.get_or(i, name, Value::boolean(false))); }

bool less(const Value& a, const Value& b) { return py_compare(a, b, CmpOp::kLt); }

}  // namespace

Value length(Interpreter&, CallArgs& a) {
  ArgReader r(a, "length");
  r.done(1);
  const Value& v = a.positional[0];
  switch (v.kind()) {
    case Kind::kUndefined: return Value::integer(0);
    case Kind::kString: return Value::integer(static_cast<int64_t>(py::length(v.str())));
    case Kind::kList: case Kind::kTuple: return Value::integer(static_cast<int64_t>(v.items().size()));
    case Kind::kDict: return Value::integer(static_cast<int64_t>(v.dict().size()));
    case Kind::kObject:
      if (std::string_view(v.object()->type_name()) == "LoopContext")
        return Value::integer(static_cast<int64_t>(v.object()->iterate().size()));  // remaining items
      [[fallthrough]];
    default:
      fail(strfmt("TypeError: object of type '%s' has no len()", type_name(v)));
  }
}

Value first(Interpreter& in, CallArgs& a) {
  ArgReader r(a, "first");
  r.done(1);
  List items = in.iterate(a.positional[0]);
  if (items.empty()) return Value::undefined("", "UndefinedError: No first item, sequence was empty.");
  return items.front();
}

Value last(Interpreter& in, CallArgs& a) {
  ArgReader r(a, "last");
  r.done(1);
  const Value& v = a.positional[0];
  if (v.kind() == Kind::kObject) fail(strfmt("TypeError: '%s' object is not reversible", type_name(v)));
  List items = in.iterate(v);
  if (items.empty()) return Value::undefined("", "UndefinedError: No last item, sequence was empty.");
  return items.back();
}

Value join(Interpreter& in, CallArgs& a) {
  ArgReader r(a, "join");
  const std::string sep = to_str(r.get_or(1, "d", Value::string("")));
  std::optional<Value> attribute = r.get(2, "attribute");
  r.done(3);
  AttrGetter get(attribute, false);
  std::string out;
  bool first_item = true;
  for (const Value& item : in.iterate(a.positional[0])) {
    if (!first_item) out += sep;
    first_item = false;
    out += to_str(get.parts.empty() ? item : get(in, item));
    in.check_size(out.size());
  }
  return Value::string(std::move(out));
}

Value list(Interpreter& in, CallArgs& a) {
  ArgReader r(a, "list");
  r.done(1);
  return Value::list(in.iterate(a.positional[0]));
}

Value reverse(Interpreter& in, CallArgs& a) {
  ArgReader r(a, "reverse");
  r.done(1);
  const Value& v = a.positional[0];
  if (v.is_string()) return Value::string(py::slice(v.str(), std::nullopt, std::nullopt, -1), v.markup());
  List items = in.iterate(v);
  std::reverse(items.begin(), items.end());
  if (v.kind() == Kind::kObject) return Value::list(std::move(items));  // jinja2: list(value) reversed
  return make_generator(std::move(items), v.kind() == Kind::kDict ? "dict_reversekeyiterator" : "list_reverseiterator");
}

Value sort(Interpreter& in, CallArgs& a) {
  ArgReader r(a, "sort");
  const bool rev = bool_arg(r, 1, "reverse");
  const bool case_sensitive = bool_arg(r, 2, "case_sensitive");
  std::optional<Value> attribute = r.get(3, "attribute");
  r.done(4);
  std::vector<AttrGetter> getters;
  if (attribute && attribute->is_string()) {
    for (const std::string& part : py::split(attribute->str(), std::string(","), -1))
      getters.emplace_back(Value::string(part), !case_sensitive);
  } else {
    getters.emplace_back(attribute, !case_sensitive);
  }
  List items = in.iterate(a.positional[0]);
  std::vector<std::pair<Value, size_t>> keyed;
  for (size_t i = 0; i < items.size(); ++i) {
    List key;
    for (const auto& g : getters) key.push_back(g(in, items[i]));
    keyed.emplace_back(Value::list(std::move(key)), i);
  }
  in.step(static_cast<int64_t>(items.size()) * 4);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return rev ? less(y.first, x.first) : less(x.first, y.first);
  });
  List out;
  for (const auto& k : keyed) out.push_back(items[k.second]);
  return Value::list(std::move(out));
}

Value dictsort(Interpreter& in, CallArgs& a) {
  ArgReader r(a, "dictsort");
  const bool case_sensitive = bool_arg(r, 1, "case_sensitive");
  const std::string by = to_str(r.get_or(2, "by", Value::string("key")));
  const bool rev = bool_arg(r, 3, "reverse");
  r.done(4);
  if (by != "key" && by != "value") fail("FilterArgumentError: You can only sort by either \"key\" or \"value\"");
  const Value& v = a.positional[0];
  if (v.kind() != Kind::kDict) fail(strfmt("AttributeError: '%s' object has no attribute 'items'", type_name(v)));
  List pairs;
  for (const auto& [k, x] : v.dict().entries()) pairs.push_back(Value::tuple({k, x}));
  const size_t pos = by == "key" ? 0 : 1;
  auto key = [&](const Value& p) { return case_sensitive ? p.items()[pos] : ignore_case(p.items()[pos]); };
  in.step(static_cast<int64_t>(pairs.size()) * 4);
  std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& x, const Value& y) {
    return rev ? less(key(y), key(x)) : less(key(x), key(y));
  });
  return Value::list(std::move(pairs));
}

Value unique(Interpreter& in, CallArgs& a) {
  ArgReader r(a, "unique");
  const bool case_sensitive = bool_arg(r, 1, "case_sensitive");
  std::optional<Value> attribute = r.get(2, "attribute");
  r.done(3);
  AttrGetter get(attribute, !case_sensitive);
  Dict seen;
  List out;
  for (const Value& item : in.iterate(a.positional[0])) {
    Value k = get(in, item);
    if (seen.find(k)) continue;
    seen.set(k, Value::none());
    out.push_back(item);
  }
  return make_generator(std::move(out));
}

namespace {

Value min_max(Interpreter& in, CallArgs& a, bool is_max) {
  ArgReader r(a, is_max ? "max" : "min");
  const bool case_sensitive = bool_arg(r, 1, "case_sensitive");
  std::optional<Value> attribute = r.get(2, "attribute");
  r.done(3);
  List items = in.iterate(a.positional[0]);
  if (items.empty()) return Value::undefined("", "UndefinedError: No aggregated item, sequence was empty.");
  AttrGetter get(attribute, !case_sensitive);
  size_t best = 0;
  Value best_key = get(in, items[0]);
  for (size_t i = 1; i < items.size(); ++i) {
    Value k = get(in, items[i]);
    if (py_compare(k, best_key, is_max ? CmpOp::kGt : CmpOp::kLt)) {
      best = i;
      best_key = std::move(k);
    }
  }
  return items[best];
}

}  // namespace

Value min(Interpreter& in, CallArgs& a) { return min_max(in, a, false); }
Value max(Interpreter& in, CallArgs& a) { return min_max(in, a, true); }

// CPython 3.12 builtin sum(): an int fast path, then a float path with Neumaier compensation, then
// generic `+` for anything else.
Value sum(Interpreter& in, CallArgs& a) {
  ArgReader r(a, "sum");
  std::optional<Value> attribute = r.get(1, "attribute");
  Value result = r.get_or(2, "start", Value::integer(0));
  r.done(3);
  if (result.is_string()) fail("TypeError: sum() can't sum strings [use ''.join(seq) instead]");
  AttrGetter get(attribute, false);
  const List items = in.iterate(a.positional[0]);
  auto item = [&](size_t k) { return get.parts.empty() ? items[k] : get(in, items[k]); };
  auto is_int = [](const Value& v) { return v.kind() == Kind::kInt || v.kind() == Kind::kBool; };
  size_t i = 0;
  if (result.kind() == Kind::kInt) {
    int64_t acc = result.as_int();
    bool switched = false;
    for (; i < items.size() && !switched; ++i) {
      Value v = item(i);
      if (!is_int(v)) {
        result = binary_op(in, BinOp::kAdd, Value::integer(acc), v);
        switched = true;
      } else if (__builtin_add_overflow(acc, v.as_int(), &acc)) {
        fail("OverflowError: integer result does not fit in 64 bits");
      }
    }
    if (!switched) return Value::integer(acc);
  }
  if (result.kind() == Kind::kFloat) {
    double f = result.as_float(), c = 0.0;
    for (; i < items.size(); ++i) {
      Value v = item(i);
      if (v.kind() == Kind::kFloat) {
        const double x = v.as_float(), t = f + x;
        c += std::fabs(f) >= std::fabs(x) ? (f - t) + x : (x - t) + f;
        f = t;
      } else if (is_int(v)) {
        f += static_cast<double>(v.as_int());
      } else {
        if (c != 0.0 && std::isfinite(c)) f += c;
        result = binary_op(in, BinOp::kAdd, Value::number(f), v);
        ++i;
        break;
      }
    }
    if (result.kind() == Kind::kFloat) {  // reached the end on the float path
      if (c != 0.0 && std::isfinite(c)) f += c;
      return Value::number(f);
    }
  }
  for (; i < items.size(); ++i) result = binary_op(in, BinOp::kAdd, result, item(i));
  return result;
}

Value map(Interpreter& in, CallArgs& a) {
  List items = in.iterate(a.positional[0]);
  List out;
  if (a.positional.size() == 1 && !a.kwargs.empty() && a.kwargs[0].first == "attribute") {
    ArgReader r(a, "map");
    std::optional<Value> attribute = r.get(99, "attribute");
    std::optional<Value> def = r.get(99, "default");
    r.done(1);
    AttrGetter get(attribute, false, def ? def : std::optional<Value>(Value::none()));
    for (const Value& item : items) out.push_back(get(in, item));
    return make_generator(std::move(out));
  }
  if (a.positional.size() < 2) fail("FilterArgumentError: map requires a filter argument");
  const std::string name = to_str(a.positional[1]);
  for (const Value& item : items) {
    CallArgs call;
    call.positional.push_back(item);
    call.positional.insert(call.positional.end(), a.positional.begin() + 2, a.positional.end());
    call.kwargs = a.kwargs;
    out.push_back(apply_filter(in, name, call));
  }
  return make_generator(std::move(out));
}

namespace {

Value select_reject(Interpreter& in, CallArgs& a, bool keep_when, bool lookup_attr) {
  List items = in.iterate(a.positional[0]);
  size_t off = 1;
  std::optional<AttrGetter> get;
  if (lookup_attr) {
    if (a.positional.size() < 2) fail("FilterArgumentError: Missing parameter for attribute name");
    get.emplace(a.positional[1], false);
    off = 2;
  }
  std::optional<std::string> test;
  if (a.positional.size() > off) test = to_str(a.positional[off]);
  List out;
  for (const Value& item : items) {
    Value x = get ? (*get)(in, item) : item;
    bool ok;
    if (test) {
      CallArgs call;
      call.positional.push_back(x);
      call.positional.insert(call.positional.end(), a.positional.begin() + static_cast<std::ptrdiff_t>(off + 1),
                             a.positional.end());
      call.kwargs = a.kwargs;
      ok = apply_test(in, *test, call);
    } else {
      ok = truthy(x);
    }
    if (ok == keep_when) out.push_back(item);
  }
  return make_generator(std::move(out));
}

}  // namespace

Value select(Interpreter& in, CallArgs& a) { return select_reject(in, a, true, false); }
Value reject(Interpreter& in, CallArgs& a) { return select_reject(in, a, false, false); }
Value selectattr(Interpreter& in, CallArgs& a) { return select_reject(in, a, true, true); }
Value rejectattr(Interpreter& in, CallArgs& a) { return select_reject(in, a, false, true); }

Value batch(Interpreter& in, CallArgs& a) {
  ArgReader r(a, "batch");
  std::optional<Value> count_v = r.get(1, "linecount");
  Value fill = r.get_or(2, "fill_with", Value::none());
  r.done(3);
  if (!count_v || (count_v->kind() != Kind::kInt && count_v->kind() != Kind::kBool))
    fail("TypeError: batch() linecount must be an integer");
  const int64_t count = count_v->as_int();
  List out, tmp;
  for (const Value& item : in.iterate(a.positional[0])) {
    if (static_cast<int64_t>(tmp.size()) == count) {
      out.push_back(Value::list(std::move(tmp)));
      tmp.clear();
    }
    tmp.push_back(item);
  }
  if (!tmp.empty()) {
    if (!fill.is_none() && static_cast<int64_t>(tmp.size()) < count) {
      in.check_size(static_cast<size_t>(count) * 16);
      tmp.resize(static_cast<size_t>(count), fill);
    }
    out.push_back(Value::list(std::move(tmp)));
  }
  return make_generator(std::move(out));
}

Value slice(Interpreter& in, CallArgs& a) {
  ArgReader r(a, "slice");
  std::optional<Value> slices_v = r.get(1, "slices");
  Value fill = r.get_or(2, "fill_with", Value::none());
  r.done(3);
  if (!slices_v || (slices_v->kind() != Kind::kInt && slices_v->kind() != Kind::kBool))
    fail("TypeError: slice() slices must be an integer");
  const int64_t slices = slices_v->as_int();
  if (slices == 0) fail("ZeroDivisionError: integer division or modulo by zero");
  List seq = in.iterate(a.positional[0]);
  const auto n = static_cast<int64_t>(seq.size());
  if (slices < 0) return make_generator({});
  in.step(slices);
  const int64_t per = n / slices, extra = n % slices;
  int64_t offset = 0;
  List out;
  for (int64_t k = 0; k < slices; ++k) {
    const int64_t start = offset + k * per;
    if (k < extra) ++offset;
    const int64_t end = offset + (k + 1) * per;
    List tmp(seq.begin() + std::min(start, n), seq.begin() + std::min(std::max(end, start), n));
    if (!fill.is_none() && k >= extra) tmp.push_back(fill);
    out.push_back(Value::list(std::move(tmp)));
  }
  return make_generator(std::move(out));
}

Value items(Interpreter&, CallArgs& a) {
  ArgReader r(a, "items");
  r.done(1);
  const Value& v = a.positional[0];
  if (v.is_undefined()) return make_generator({});
  if (v.kind() != Kind::kDict) fail("TypeError: Can only get item pairs from a mapping.");
  List out;
  for (const auto& [k, x] : v.dict().entries()) out.push_back(Value::tuple({k, x}));
  return make_generator(std::move(out));
}

}  // namespace bunsen::text::jinja::filters
