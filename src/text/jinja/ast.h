// Jinja2 syntax tree: one Expr struct and one Stmt struct with a kind tag (jinja2.nodes, flattened).
// Not the evaluator. Invariants: the tree is immutable after parsing and owned by a Template; its depth is
// bounded by the parser (kMaxParseDepth), so walking it recursively cannot overflow the stack.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja/value.h"

namespace bunsen::text::jinja {

inline constexpr int kMaxParseDepth = 256;  // parser recursion (nested statements/brackets/unary ops)
inline constexpr int kMaxExprDepth = 256;   // depth of one expression tree (a+b+c+... nests too)

enum class ExprKind : uint8_t {
  kConst,      // value
  kName,       // name
  kList,       // args = items
  kTuple,      // args = items
  kDict,       // args = k0, v0, k1, v1, ...
  kGetAttr,    // args[0] . name
  kGetItem,    // args[0] [ args[1] ]
  kSlice,      // args[0] [ args[1] : args[2] : args[3] ] (null = omitted)
  kCall,       // args[0] ( args[1..], kwargs, dyn_args, dyn_kwargs )
  kFilter,     // args[0] | name( args[1..] ... ); args[0] null in filter blocks
  kTest,       // args[0] is name( args[1..] ... )
  kNeg, kPos,  // args[0]
  kNot,        // args[0]
  kAnd, kOr,   // args[0], args[1]
  kBinary,     // args[0] op args[1]: + - * / // % **
  kConcat,     // args joined with ~
  kCompare,    // args[0] ops[0] args[1] ops[1] args[2] ...
  kCondExpr,   // args[0] if args[1] else args[2] (args[2] null: undefined)
};

enum class BinOp : uint8_t { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow };
enum class CompareOp : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind = ExprKind::kConst;
  int line = 0;
  int depth = 1;     // 1 + max depth of the children
  Value value;       // kConst
  std::string name;  // kName, kGetAttr, kFilter, kTest
  BinOp op = BinOp::kAdd;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  ExprPtr dyn_args, dyn_kwargs;  // *args, **kwargs in calls
  std::vector<CompareOp> ops;    // kCompare
};

// Assignment target: a name, a tuple of targets, or namespace attribute (ns.attr).
struct Target {
  enum class Kind : uint8_t { kName, kTuple, kNsAttr } kind = Kind::kName;
  std::string name, attr;
  std::vector<Target> items;
};

enum class StmtKind : uint8_t {
  kData,       // text
  kPrint,      // {{ expr }}
  kIf,         // expr, body, else_body (elif = nested kIf in else_body)
  kFor,        // target in expr [if cond] [recursive], body, else_body
  kSet,        // target = expr
  kSetBlock,   // {% set target %}body{% endset %}, filters applied to the body
  kMacro,      // name(params) body
  kCallBlock,  // {% call(params) expr %}body{% endcall %}
  kFilterBlock,
  kWith,       // assigns, body
  kScope,      // {% block %} (text = "block": sees only top-level names) / {% generation %}: new scope
  kAutoescape,  // {% autoescape expr %}body{% endautoescape %}
  kBreak, kContinue,
  kUnsupported,  // include / import / extends: fails when executed (jinja2 has no loader here)
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Param {
  std::string name;
  ExprPtr default_value;  // null: no default
};

struct Stmt {
  StmtKind kind = StmtKind::kData;
  int line = 0;
  std::string text;  // kData text, kMacro name, kUnsupported tag name
  ExprPtr expr;      // value / condition / iterable / call; kSetBlock/kFilterBlock: filter chain (input null)
  ExprPtr cond;      // kFor: filter condition
  bool recursive = false;
  Target target;
  std::vector<Param> params;     // kMacro / kCallBlock
  std::vector<std::pair<Target, ExprPtr>> assigns;  // kWith
  Body body, else_body;
  // kMacro / kCallBlock: whether the body reads `caller`, `varargs`, `kwargs` (jinja2 decides this statically).
  bool uses_caller = false, uses_varargs = false, uses_kwargs = false;
};

}  // namespace bunsen::text::jinja
