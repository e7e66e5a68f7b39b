"""Confluent's JSON Schema compatibility rules: walk the old (original) and new (update) schema
side by side, record every difference by type and path, and call the change incompatible when
any difference is outside COMPATIBLE (Confluent's json/diff/SchemaDiff).

Schemas are classified the way Confluent's loader (everit) sees them: an empty schema, `false`,
one typed schema (string, number/integer, boolean, null, object, array), an enum, a `not`, or a
combined schema (allOf/anyOf/oneOf; several types, or a type beside a combinator, are an allOf
of the parts; `"type": [..]` is an anyOf). `$ref`s are followed through the schema's resolver.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

COMPATIBLE = frozenset("""
ID_CHANGED DESCRIPTION_CHANGED TITLE_CHANGED DEFAULT_CHANGED SCHEMA_REMOVED TYPE_EXTENDED
MAX_LENGTH_INCREASED MAX_LENGTH_REMOVED MIN_LENGTH_DECREASED MIN_LENGTH_REMOVED PATTERN_REMOVED
MAXIMUM_INCREASED MAXIMUM_REMOVED MINIMUM_DECREASED MINIMUM_REMOVED EXCLUSIVE_MAXIMUM_INCREASED
EXCLUSIVE_MAXIMUM_REMOVED EXCLUSIVE_MINIMUM_DECREASED EXCLUSIVE_MINIMUM_REMOVED MULTIPLE_OF_REDUCED
MULTIPLE_OF_REMOVED REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED REQUIRED_ATTRIBUTE_REMOVED DEPENDENCY_ARRAY_NARROWED
DEPENDENCY_ARRAY_REMOVED DEPENDENCY_SCHEMA_REMOVED MAX_PROPERTIES_INCREASED MAX_PROPERTIES_REMOVED
MIN_PROPERTIES_DECREASED MIN_PROPERTIES_REMOVED ADDITIONAL_PROPERTIES_ADDED ADDITIONAL_PROPERTIES_EXTENDED
PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL
OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL
PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL
PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL MAX_ITEMS_INCREASED MAX_ITEMS_REMOVED
MIN_ITEMS_DECREASED MIN_ITEMS_REMOVED UNIQUE_ITEMS_REMOVED ADDITIONAL_ITEMS_ADDED ADDITIONAL_ITEMS_EXTENDED
ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL ITEM_ADDED_TO_CLOSED_CONTENT_MODEL
ITEM_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL
ITEM_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL ITEM_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL
ENUM_ARRAY_EXTENDED COMBINED_TYPE_EXTENDED PRODUCT_TYPE_NARROWED SUM_TYPE_EXTENDED NOT_TYPE_NARROWED
""".split())

_COMBINATORS = ("allOf", "anyOf", "oneOf")
_INFERRED = {  # keywords that make an untyped schema an object/array/string/number schema (everit)
    "object": ("properties", "required", "additionalProperties", "patternProperties", "minProperties",
               "maxProperties", "dependencies", "propertyNames"),
    "array": ("items", "additionalItems", "minItems", "maxItems", "uniqueItems", "contains", "prefixItems"),
    "string": ("minLength", "maxLength", "pattern"),
    "number": ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"),
}
_ANNOTATIONS = ("$schema", "$id", "id", "title", "description", "default", "examples", "$comment", "definitions",
                "$defs", "format", "readOnly", "writeOnly", "deprecated")

# Message templates (Confluent's Difference.error()); {a} = the update's label, {b} = the original's.
_MESSAGES = [
    ({"MAXIMUM_ADDED", "MINIMUM_ADDED", "EXCLUSIVE_MAXIMUM_ADDED", "EXCLUSIVE_MINIMUM_ADDED", "MULTIPLE_OF_ADDED",
      "MAX_LENGTH_ADDED", "MIN_LENGTH_ADDED", "PATTERN_ADDED", "REQUIRED_ATTRIBUTE_ADDED", "MAX_PROPERTIES_ADDED",
      "MIN_PROPERTIES_ADDED", "DEPENDENCY_ARRAY_ADDED", "DEPENDENCY_SCHEMA_ADDED", "MAX_ITEMS_ADDED",
      "MIN_ITEMS_ADDED", "UNIQUE_ITEMS_ADDED", "ADDITIONAL_ITEMS_REMOVED", "ADDITIONAL_PROPERTIES_REMOVED"},
     "The keyword at path '{path}' in the {a} schema is not present in the {b} schema"),
    ({"MIN_LENGTH_INCREASED", "MINIMUM_INCREASED", "EXCLUSIVE_MINIMUM_INCREASED", "MIN_PROPERTIES_INCREASED",
      "MULTIPLE_OF_EXPANDED", "MIN_ITEMS_INCREASED"},
     "The value at path '{path}' in the {a} schema is more than its value in the {b} schema"),
    ({"MAX_LENGTH_DECREASED", "MAXIMUM_DECREASED", "MAX_ITEMS_DECREASED", "EXCLUSIVE_MAXIMUM_DECREASED",
      "MAX_PROPERTIES_DECREASED"},
     "The value at path '{path}' in the {a} schema is less than its value in the {b} schema"),
    ({"PATTERN_CHANGED", "MULTIPLE_OF_CHANGED", "DEPENDENCY_ARRAY_CHANGED"},
     "The value at path '{path}' is different between the {a} and {b} schema"),
    ({"ADDITIONAL_ITEMS_NARROWED", "ENUM_ARRAY_NARROWED", "SUM_TYPE_NARROWED", "ADDITIONAL_PROPERTIES_NARROWED"},
     "An array or combined type at path '{path}' has fewer elements in the {a} schema than the {b} schema"),
    ({"DEPENDENCY_ARRAY_EXTENDED", "PRODUCT_TYPE_EXTENDED", "SUM_TYPE_EXTENDED", "NOT_TYPE_EXTENDED"},
     "An array or combined type at path '{path}' has more elements in the {a} schema than the {b} schema"),
    ({"TYPE_CHANGED", "TYPE_NARROWED", "COMBINED_TYPE_CHANGED", "COMBINED_TYPE_SUBSCHEMAS_CHANGED",
      "ENUM_ARRAY_CHANGED"},
     "A type at path '{path}' is different between the {a} schema and the {b} schema"),
    ({"PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL", "ITEM_ADDED_TO_OPEN_CONTENT_MODEL"},
     "The {a} schema has an open content model and has a property or item at path '{path}' which is missing in "
     "the {b} schema"),
    ({"REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL"},
     "The {a} schema has an unopen content model and has a required property at path '{path}' which is missing "
     "in the {b} schema"),
    ({"PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL", "ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL"},
     "The {a} schema has a closed content model and is missing a property or item present at path '{path}' in "
     "the {b} schema"),
    ({"PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
      "ITEM_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"},
     "A property or item is missing in the {a} schema but present at path '{path}' in the {b} schema and is not "
     "covered by its partially open content model"),
    ({"PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL",
      "ITEM_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL"},
     "The {a} schema has a property or item at path '{path}' which is missing in the {b} schema and is not "
     "covered by its partially open content model"),
]


def describe(kind: str, path: str, labels: tuple[str, str]) -> str:
    template = next((t for kinds, t in _MESSAGES if kind in kinds), "A change at path '{path}' ({kind})")
    text = template.format(path=path, a=labels[0], b=labels[1], kind=kind)
    return f'{{errorType:"{kind}", description:"{text}"}}'


def compare(original: tuple[Any, Any], update: tuple[Any, Any], *, labels: tuple[str, str]) -> list[str]:
    """Incompatibility messages for moving from `original` to `update`, each a (schema, resolver)."""
    ctx = _Context(visited=set())
    _compare(ctx, original, update)
    return [describe(kind, path, labels) for kind, path in ctx.differences if kind not in COMPATIBLE]


@dataclass
class _Context:
    visited: set
    path: str = "#"
    differences: list = field(default_factory=list)

    def add(self, kind: str, suffix: str | None = None) -> None:
        self.differences.append((kind, self.path if suffix is None else f"{self.path}/{suffix}"))

    def sub(self) -> "_Context":
        return _Context(self.visited, self.path)

    def at(self, suffix: str) -> "_Context":
        return _Context(self.visited, f"{self.path}/{suffix}", self.differences)

    @property
    def compatible(self) -> bool:
        return all(kind in COMPATIBLE for kind, _ in self.differences)


@dataclass
class _Model:
    kind: str  # empty false string number boolean null object array enum not combined
    schema: Any
    resolver: Any
    criterion: str | None = None
    subschemas: list = field(default_factory=list)
    source: Any = None  # the schema object this model was read from (recursion guard)


# ====================================================================== classification
def _deref(node: tuple[Any, Any]) -> tuple[Any, Any]:
    schema, resolver = node
    for _ in range(64):  # a chain of refs, not a cycle
        if not (isinstance(schema, dict) and isinstance(schema.get("$ref"), str)):
            break
        resolved = resolver.lookup(schema["$ref"])
        schema, resolver = resolved.contents, resolved.resolver
    return schema, resolver


def _model(node: tuple[Any, Any]) -> _Model:
    schema, resolver = _deref(node)
    model = _classify(schema, resolver)
    model.source = schema
    return model


def _classify(schema: Any, resolver: Any) -> _Model:
    if schema is True:
        return _Model("empty", {}, resolver)
    if schema is False:
        return _Model("false", {}, resolver)
    if not isinstance(schema, dict):
        return _Model("empty", {}, resolver)
    parts: list[dict] = []
    typed = {k: v for k, v in schema.items() if k not in (*_COMBINATORS, "enum", "const", "not")}
    types = schema.get("type")
    if isinstance(types, list) and len(types) == 1:
        types = types[0]
    if isinstance(types, list):
        parts.append({"anyOf": [{**typed, "type": t} for t in types]})
    elif isinstance(types, str):
        parts.append(typed)
    else:
        inferred = [kind for kind, words in _INFERRED.items() if any(w in schema for w in words)]
        parts.extend({**typed, "type": kind} for kind in inferred)
    if "enum" in schema:
        parts.append({"enum": schema["enum"]})
    if "const" in schema:
        parts.append({"enum": [schema["const"]]})
    if "not" in schema:
        parts.append({"not": schema["not"]})
    parts.extend({c: schema[c]} for c in _COMBINATORS if c in schema)
    if not parts:
        return _Model("empty", schema, resolver)
    if len(parts) > 1:
        return _Model("combined", schema, resolver, "allOf", parts)
    part = parts[0]
    if "enum" in part:
        return _Model("enum", part, resolver)
    if "not" in part:
        return _Model("not", part, resolver)
    for c in _COMBINATORS:
        if c in part:
            return _Model("combined", schema, resolver, c, list(part[c]))
    kind = part.get("type")
    kind = "number" if kind == "integer" else kind
    return _Model(kind if kind in ("string", "number", "boolean", "null", "object", "array") else "empty",
                  part, resolver)


# ====================================================================== comparison
def _compare(ctx: _Context, original: tuple[Any, Any] | None, update: tuple[Any, Any] | None) -> None:
    if original is None and update is None:
        return
    if original is None:
        ctx.add("SCHEMA_ADDED")
        return
    if update is None:
        ctx.add("SCHEMA_REMOVED")
        return
    o, u = _model(original), _model(update)
    if o.kind != "combined" and u.kind == "combined":
        if len(u.subschemas) == 1:
            if _try_into(ctx, o, _model((u.subschemas[0], u.resolver))):
                return
        elif u.criterion in ("anyOf", "oneOf"):
            for sub in u.subschemas:
                if _try_into(ctx, o, _model((sub, u.resolver))):
                    ctx.add("SUM_TYPE_EXTENDED")
                    return
    elif o.kind == "combined" and u.kind != "combined" and len(o.subschemas) == 1:
        if _try_into(ctx, _model((o.subschemas[0], o.resolver)), u):
            return
    if o.kind != u.kind:
        if o.kind != "false" and u.kind != "empty":
            ctx.add("TYPE_CHANGED")
        return
    _compare_models(ctx, o, u)


def _try_into(ctx: _Context, o: _Model, u: _Model) -> bool:
    sub = ctx.sub()
    _compare_models_or_kinds(sub, o, u)
    if sub.compatible:
        ctx.differences.extend(sub.differences)
        return True
    return False


def _compare_models_or_kinds(ctx: _Context, o: _Model, u: _Model) -> None:
    _compare(ctx, (o.schema if o.kind != "combined" else {o.criterion: o.subschemas}, o.resolver),
             (u.schema if u.kind != "combined" else {u.criterion: u.subschemas}, u.resolver))


def _compare_models(ctx: _Context, o: _Model, u: _Model) -> None:
    guard = (id(o.source), id(u.source))
    if guard in ctx.visited:
        return  # a recursive schema: this pair is being compared further up
    ctx.visited.add(guard)
    try:
        for word, kind in (("$id", "ID_CHANGED"), ("title", "TITLE_CHANGED"),
                           ("description", "DESCRIPTION_CHANGED"), ("default", "DEFAULT_CHANGED")):
            if isinstance(o.schema, dict) and isinstance(u.schema, dict) and o.schema.get(word) != u.schema.get(word):
                ctx.add(kind)
        compare_kind = _BY_KIND.get(o.kind)
        if compare_kind is not None:
            compare_kind(ctx, o, u)
    finally:
        ctx.visited.discard(guard)


def _limit(ctx: _Context, o: dict, u: dict, word: str, name: str) -> None:
    """maxLength/minimum/...: added, removed, increased or decreased (Confluent's names)."""
    a, b = o.get(word), u.get(word)
    if a == b or isinstance(a, bool) or isinstance(b, bool):
        return
    if a is None:
        ctx.add(f"{name}_ADDED", word)
    elif b is None:
        ctx.add(f"{name}_REMOVED", word)
    elif isinstance(a, (int, float)) and isinstance(b, (int, float)):
        ctx.add(f"{name}_INCREASED" if a < b else f"{name}_DECREASED", word)


def _string(ctx: _Context, o: _Model, u: _Model) -> None:
    _limit(ctx, o.schema, u.schema, "maxLength", "MAX_LENGTH")
    _limit(ctx, o.schema, u.schema, "minLength", "MIN_LENGTH")
    a, b = o.schema.get("pattern"), u.schema.get("pattern")
    if a is None and b is not None:
        ctx.add("PATTERN_ADDED", "pattern")
    elif a is not None and b is None:
        ctx.add("PATTERN_REMOVED", "pattern")
    elif a != b:
        ctx.add("PATTERN_CHANGED", "pattern")


def _number(ctx: _Context, o: _Model, u: _Model) -> None:
    a, b = o.schema, u.schema
    _limit(ctx, a, b, "maximum", "MAXIMUM")
    _limit(ctx, a, b, "minimum", "MINIMUM")
    _limit(ctx, a, b, "exclusiveMaximum", "EXCLUSIVE_MAXIMUM")
    _limit(ctx, a, b, "exclusiveMinimum", "EXCLUSIVE_MINIMUM")
    ma, mb = a.get("multipleOf"), b.get("multipleOf")
    if ma != mb:
        if ma is None:
            ctx.add("MULTIPLE_OF_ADDED", "multipleOf")
        elif mb is None:
            ctx.add("MULTIPLE_OF_REMOVED", "multipleOf")
        elif int(ma) and int(mb) and int(mb) % int(ma) == 0:
            ctx.add("MULTIPLE_OF_EXPANDED", "multipleOf")
        elif int(ma) and int(mb) and int(ma) % int(mb) == 0:
            ctx.add("MULTIPLE_OF_REDUCED", "multipleOf")
        else:
            ctx.add("MULTIPLE_OF_CHANGED", "multipleOf")
    ia, ib = a.get("type") == "integer", b.get("type") == "integer"
    if ia != ib:
        ctx.add("TYPE_EXTENDED" if ia else "TYPE_NARROWED")


def _enum(ctx: _Context, o: _Model, u: _Model) -> None:
    a, b = o.schema["enum"], u.schema["enum"]
    if a == b:
        return
    if all(v in b for v in a):
        ctx.add("ENUM_ARRAY_EXTENDED", "enum")
    elif all(v in a for v in b):
        ctx.add("ENUM_ARRAY_NARROWED", "enum")
    else:
        ctx.add("ENUM_ARRAY_CHANGED", "enum")


def _not(ctx: _Context, o: _Model, u: _Model) -> None:
    sub = ctx.at("not").sub()
    _compare(sub, (u.schema["not"], u.resolver), (o.schema["not"], o.resolver))  # reversed: not narrows
    ctx.at("not").add("NOT_TYPE_NARROWED" if sub.compatible else "NOT_TYPE_EXTENDED")


def _combined(ctx: _Context, o: _Model, u: _Model) -> None:
    if o.criterion != u.criterion:
        if u.criterion == "anyOf" or (u.criterion == "oneOf" and len(o.subschemas) == 1):
            ctx.add("COMBINED_TYPE_EXTENDED")
        elif u.criterion == "allOf" and len(o.subschemas) == 1 and len(u.subschemas) == 1:
            ctx.add("COMBINED_TYPE_EXTENDED")
        else:
            ctx.add("COMBINED_TYPE_CHANGED")
            return
    originals = _unique(o.subschemas)
    updates = _unique(u.subschemas)
    if len(originals) < len(updates):
        ctx.add("PRODUCT_TYPE_EXTENDED" if u.criterion == "allOf" else "SUM_TYPE_EXTENDED")
    elif len(originals) > len(updates):
        ctx.add("PRODUCT_TYPE_NARROWED" if u.criterion == "allOf" else "SUM_TYPE_NARROWED")
    edges: dict[int, dict[int, list]] = {}
    for i, a in enumerate(originals):
        for j, b in enumerate(updates):
            sub = ctx.at(f"{o.criterion}/{i}").sub()
            _compare(sub, (a, o.resolver), (b, u.resolver))
            if sub.compatible:
                edges.setdefault(i, {})[j] = sub.differences
    matching = _max_matching(edges)
    for i, j in matching.items():
        ctx.differences.extend(edges[i][j])
    if len(matching) < min(len(originals), len(updates)):
        ctx.add("COMBINED_TYPE_SUBSCHEMAS_CHANGED")


def _unique(schemas: list) -> list:
    out: list = []
    for s in schemas:
        if s not in out:
            out.append(s)
    return out


def _max_matching(edges: dict[int, dict[int, list]]) -> dict[int, int]:
    """Maximum bipartite matching (augmenting paths): original subschema -> update subschema."""
    owner: dict[int, int] = {}

    def assign(i: int, seen: set) -> bool:
        for j in edges.get(i, {}):
            if j in seen:
                continue
            seen.add(j)
            if j not in owner or assign(owner[j], seen):
                owner[j] = i
                return True
        return False

    for i in edges:
        assign(i, set())
    return {i: j for j, i in owner.items()}


def _is_open(schema: dict) -> bool:
    return not schema.get("patternProperties") and schema.get("additionalProperties", True) is True


def _partial(schema: dict, name: str):
    """The schema a property falls under in a partially open content model, if any."""
    import re

    for pattern, sub in (schema.get("patternProperties") or {}).items():
        try:
            if re.search(pattern, name):
                return sub
        except re.error:
            continue
    extra = schema.get("additionalProperties")
    return extra if isinstance(extra, dict) else None


def _object(ctx: _Context, o: _Model, u: _Model) -> None:
    a, b = o.schema, u.schema
    props_a, props_b = a.get("properties") or {}, b.get("properties") or {}
    req_a, req_b = set(a.get("required") or ()), set(b.get("required") or ())
    for name in props_a:
        if name in props_b:
            if name in req_a and name not in req_b:
                ctx.at("required").add("REQUIRED_ATTRIBUTE_REMOVED", name)
            elif name not in req_a and name in req_b:
                has_default = isinstance(props_b[name], dict) and "default" in props_b[name]
                ctx.at("required").add("REQUIRED_ATTRIBUTE_WITH_DEFAULT_ADDED" if has_default
                                       else "REQUIRED_ATTRIBUTE_ADDED", name)
    for name in sorted(set(props_a) | set(props_b)):
        here = ctx.at(f"properties/{name}")
        if name not in props_b:
            if _is_open(b):
                here.add("PROPERTY_REMOVED_FROM_OPEN_CONTENT_MODEL")
            elif (cover := _partial(b, name)) is not None:
                sub = here.sub()
                _compare(sub, (props_a[name], o.resolver), (cover, u.resolver))
                here.differences.extend(sub.differences)
                here.add("PROPERTY_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL" if sub.compatible
                         else "PROPERTY_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")
            else:
                here.add("PROPERTY_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL" if props_a[name] is False
                         else "PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL")
        elif name not in props_a:
            if _is_open(a):
                empty = _model((props_b[name], u.resolver)).kind == "empty"
                here.add("PROPERTY_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL" if empty
                         else "PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL")
            else:
                if (cover := _partial(a, name)) is not None:
                    sub = here.sub()
                    _compare(sub, (cover, o.resolver), (props_b[name], u.resolver))
                    here.differences.extend(sub.differences)
                    here.add("PROPERTY_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL" if sub.compatible
                             else "PROPERTY_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")
                if name in req_b:
                    has_default = isinstance(props_b[name], dict) and "default" in props_b[name]
                    here.add("REQUIRED_PROPERTY_WITH_DEFAULT_ADDED_TO_UNOPEN_CONTENT_MODEL" if has_default
                             else "REQUIRED_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL")
                else:
                    here.add("OPTIONAL_PROPERTY_ADDED_TO_UNOPEN_CONTENT_MODEL")
        else:
            _compare(here, (props_a[name], o.resolver), (props_b[name], u.resolver))
    _dependencies(ctx.at("dependencies"), o, u)
    _additional(ctx.at("additionalProperties"), a.get("additionalProperties", True),
                b.get("additionalProperties", True), "PROPERTIES", o, u)
    _limit(ctx, a, b, "maxProperties", "MAX_PROPERTIES")
    _limit(ctx, a, b, "minProperties", "MIN_PROPERTIES")


def _dependencies(ctx: _Context, o: _Model, u: _Model) -> None:
    deps_a, deps_b = o.schema.get("dependencies") or {}, u.schema.get("dependencies") or {}
    for name in sorted(set(deps_a) | set(deps_b)):
        a, b = deps_a.get(name), deps_b.get(name)
        here = ctx.at(name)
        if isinstance(a, list) or isinstance(b, list):
            if b is None:
                here.add("DEPENDENCY_ARRAY_REMOVED")
            elif a is None:
                here.add("DEPENDENCY_ARRAY_ADDED")
            elif set(a) != set(b):
                here.add("DEPENDENCY_ARRAY_EXTENDED" if set(a) <= set(b) else
                         "DEPENDENCY_ARRAY_NARROWED" if set(b) <= set(a) else "DEPENDENCY_ARRAY_CHANGED")
        elif b is None:
            here.add("DEPENDENCY_SCHEMA_REMOVED")
        elif a is None:
            here.add("DEPENDENCY_SCHEMA_ADDED")
        else:
            _compare(here, (a, o.resolver), (b, u.resolver))


def _additional(ctx: _Context, a: Any, b: Any, what: str, o: _Model, u: _Model) -> None:
    """additionalProperties / additionalItems: permitted or not, open or bounded by a schema."""
    permits_a, permits_b = a is not False, b is not False
    if permits_a != permits_b:
        ctx.add(f"ADDITIONAL_{what}_ADDED" if permits_b else f"ADDITIONAL_{what}_REMOVED")
    elif not isinstance(a, dict) and isinstance(b, dict):
        ctx.add(f"ADDITIONAL_{what}_NARROWED")
    elif isinstance(a, dict) and not isinstance(b, dict):
        ctx.add(f"ADDITIONAL_{what}_EXTENDED")
    elif isinstance(a, dict) and isinstance(b, dict):
        _compare(ctx, (a, o.resolver), (b, u.resolver))


def _tuple_items(schema: dict) -> tuple[list, Any]:
    """(positional item schemas, the schema of items past them): draft 7 and 2020-12 spellings."""
    if "prefixItems" in schema:
        return list(schema["prefixItems"]), schema.get("items", True)
    if isinstance(schema.get("items"), list):
        return list(schema["items"]), schema.get("additionalItems", True)
    return [], schema.get("additionalItems", True)


def _array(ctx: _Context, o: _Model, u: _Model) -> None:
    a, b = o.schema, u.schema
    items_a = a.get("items") if isinstance(a.get("items"), (dict, bool)) and "prefixItems" not in a else None
    items_b = b.get("items") if isinstance(b.get("items"), (dict, bool)) and "prefixItems" not in b else None
    _compare(ctx.at("items"), None if items_a is None else (items_a, o.resolver),
             None if items_b is None else (items_b, u.resolver))
    tuple_a, extra_a = _tuple_items(a)
    tuple_b, extra_b = _tuple_items(b)
    open_a = extra_a is True or extra_a == {}
    open_b = extra_b is True or extra_b == {}
    for index in range(max(len(tuple_a), len(tuple_b))):
        here = ctx.at(f"items/{index}")
        if index < len(tuple_a) and index < len(tuple_b):
            _compare(here, (tuple_a[index], o.resolver), (tuple_b[index], u.resolver))
        elif index < len(tuple_a):  # removed from the update
            if open_b:
                here.add("ITEM_REMOVED_FROM_OPEN_CONTENT_MODEL")
            elif isinstance(extra_b, dict):
                sub = here.sub()
                _compare(sub, (tuple_a[index], o.resolver), (extra_b, u.resolver))
                here.differences.extend(sub.differences)
                here.add("ITEM_REMOVED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL" if sub.compatible
                         else "ITEM_REMOVED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")
            else:
                here.add("ITEM_WITH_FALSE_REMOVED_FROM_CLOSED_CONTENT_MODEL" if tuple_a[index] is False
                         else "ITEM_REMOVED_FROM_CLOSED_CONTENT_MODEL")
        else:  # added in the update
            if open_a:
                empty = _model((tuple_b[index], u.resolver)).kind == "empty"
                here.add("ITEM_WITH_EMPTY_SCHEMA_ADDED_TO_OPEN_CONTENT_MODEL" if empty
                         else "ITEM_ADDED_TO_OPEN_CONTENT_MODEL")
            elif isinstance(extra_a, dict):
                sub = here.sub()
                _compare(sub, (extra_a, o.resolver), (tuple_b[index], u.resolver))
                here.differences.extend(sub.differences)
                here.add("ITEM_ADDED_IS_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL" if sub.compatible
                         else "ITEM_ADDED_NOT_COVERED_BY_PARTIALLY_OPEN_CONTENT_MODEL")
            else:
                here.add("ITEM_ADDED_TO_CLOSED_CONTENT_MODEL")
    if tuple_a or tuple_b:
        _additional(ctx.at("additionalItems"), extra_a, extra_b, "ITEMS", o, u)
    _limit(ctx, a, b, "maxItems", "MAX_ITEMS")
    _limit(ctx, a, b, "minItems", "MIN_ITEMS")
    if bool(a.get("uniqueItems")) != bool(b.get("uniqueItems")):
        ctx.add("UNIQUE_ITEMS_REMOVED" if a.get("uniqueItems") else "UNIQUE_ITEMS_ADDED", "uniqueItems")


_BY_KIND = {"string": _string, "number": _number, "enum": _enum, "not": _not, "combined": _combined,
            "object": _object, "array": _array}
