//! The JSON Schema of a saved tool's arguments: what one may be (an object schema within size
//! caps, whose properties are Python parameter names, valid against the JSON Schema
//! meta-schema, with no reference outside itself), and the check of a call's arguments
//! against it, with errors that name the field.
//!
//! The work a hostile schema can cause is bounded: the `jsonschema` crate is built without its
//! HTTP and file resolvers and compiled `offline`, so nothing is ever fetched; references and
//! ids (`$ref`, `$id`, anchors) are refused, since a few nested references to each other make
//! validation time exponential in the schema's size; a schema has at most
//! [`MAX_SCHEMA_NODES`] values and [`MAX_DEPTH`] levels; `pattern` runs on the linear-time
//! `regex` engine, with at most [`MAX_PATTERNS`] patterns of at most [`REGEX_SIZE_LIMIT`]
//! compiled bytes (and [`REGEX_DFA_SIZE_LIMIT`] of matching cache) each. Drafts 2020-12 (the
//! default) and 7 are accepted, named by `$schema`; under draft 7 `format` is an assertion
//! (that draft's rule), under 2020-12 an annotation.
//!
//! Compiling is the costly part (milliseconds to a fraction of a second at the caps), so a
//! saved tool's validator is compiled once per version and kept in [`Validators`]; callers run
//! the compilation off the async worker threads.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};

/// The largest schema, as compact JSON.
pub const MAX_SCHEMA_BYTES: usize = 32 * 1024;
/// Properties (and so parameters of `run`) one tool may have.
pub const MAX_PROPERTIES: usize = 64;
/// How deep a schema may nest.
pub const MAX_DEPTH: usize = 32;
/// Values (objects, arrays, strings, numbers...) in one schema.
pub const MAX_SCHEMA_NODES: usize = 5_000;
/// `pattern` keywords and `patternProperties` entries in one schema.
pub const MAX_PATTERNS: usize = 16;
/// The most one pattern may compile to (the `regex` crate's size limit), in bytes.
pub const REGEX_SIZE_LIMIT: usize = 256 * 1024;
/// The most one pattern's lazy DFA may cache while matching, in bytes.
pub const REGEX_DFA_SIZE_LIMIT: usize = 256 * 1024;
/// Compiled validators kept (one per tool version); past that, one is dropped for each new
/// one. With the caps above each holds at most a few MiB.
const MAX_CACHED_VALIDATORS: usize = 128;
/// Keys no schema may use: references and ids (see the module's comment), and the MCP
/// annotation that makes clients copy arguments into HTTP headers.
const REFUSED_KEYS: [&str; 8] = [
    "$ref",
    "$dynamicRef",
    "$recursiveRef",
    "$id",
    "$anchor",
    "$dynamicAnchor",
    "$recursiveAnchor",
    "x-mcp-header",
];
/// Argument errors reported at once.
const MAX_ERRORS: usize = 5;
/// The longest tool name.
const MAX_NAME_CHARS: usize = 48;

/// Python's keywords (and soft keywords that cannot be parameters), which no property may be.
const PYTHON_KEYWORDS: [&str; 35] = [
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
    "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import",
    "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while",
    "with", "yield",
];

/// A tool's name must be `[a-z][a-z0-9_]{0,47}`.
pub fn check_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_lowercase());
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if first_ok && rest_ok && name.len() <= MAX_NAME_CHARS {
        Ok(())
    } else {
        Err(format!(
            "the name {name:?} is not allowed: use [a-z][a-z0-9_]{{0,47}} (a lower-case letter, then up to 47 lower-case letters, digits or underscores)"
        ))
    }
}

/// `schema` as an object schema a tool may have, with its compiled validator, or what is wrong
/// with it. Blocking work (meta-validation and compilation): call it off the async workers.
pub fn check_schema(schema: &Value) -> Result<(Map<String, Value>, jsonschema::Validator), String> {
    let object = bounded_object(schema, "input_schema")?;
    if object.get("type") != Some(&Value::String("object".into())) {
        return Err(
            "input_schema must have \"type\": \"object\" (a tool takes named arguments)".into(),
        );
    }
    check_properties(object)?;
    let validator = valid_schema(schema, object, "input_schema")?;
    Ok((object.clone(), validator))
}

/// `schema` as the output schema a tool may declare (within the same bounds as an input
/// schema, and an object schema: MCP gives a result's data as an object), with its compiled
/// validator, or what is wrong with it. Blocking work, as [`check_schema`].
pub fn check_output_schema(
    schema: &Value,
) -> Result<(Map<String, Value>, jsonschema::Validator), String> {
    let object = bounded_object(schema, "output_schema")?;
    if object.get("type") != Some(&Value::String("object".into())) {
        return Err(
            "output_schema must have \"type\": \"object\": run() must return a dict, which MCP clients read as the call's structured result"
                .into(),
        );
    }
    let validator = valid_schema(schema, object, "output_schema")?;
    Ok((object.clone(), validator))
}

/// `schema` (the argument `field`) as a JSON object within [`MAX_SCHEMA_BYTES`] and the
/// bounds of [`check_shape`].
fn bounded_object<'a>(schema: &'a Value, field: &str) -> Result<&'a Map<String, Value>, String> {
    let Value::Object(object) = schema else {
        return Err(format!("{field} must be a JSON object (a JSON Schema)"));
    };
    let size = serde_json::to_vec(schema).map_or(usize::MAX, |json| json.len());
    if size > MAX_SCHEMA_BYTES {
        return Err(format!(
            "{field} is {size} bytes of JSON, more than the {} KiB allowed",
            MAX_SCHEMA_BYTES / 1024
        ));
    }
    check_shape(schema, field)?;
    Ok(object)
}

/// The validator of `schema` (the argument `field`), once it is valid against its draft's
/// meta-schema.
fn valid_schema(
    schema: &Value,
    object: &Map<String, Value>,
    field: &str,
) -> Result<jsonschema::Validator, String> {
    let meta = match draft_of(object, field)? {
        jsonschema::Draft::Draft7 => jsonschema::draft7::meta::validate(schema),
        _ => jsonschema::draft202012::meta::validate(schema),
    };
    meta.map_err(|error| format!("{field} is not a valid JSON Schema: {error}"))?;
    compile(schema)
}

/// The schema's properties (at most [`MAX_PROPERTIES`], each a usable parameter name) and its
/// `required` list, which may name only those properties.
fn check_properties(object: &Map<String, Value>) -> Result<(), String> {
    let properties = match object.get("properties") {
        None => Map::new(),
        Some(Value::Object(properties)) => properties.clone(),
        Some(_) => return Err("input_schema's \"properties\" must be an object".into()),
    };
    if properties.len() > MAX_PROPERTIES {
        return Err(format!(
            "input_schema has {} properties; a tool may take at most {MAX_PROPERTIES} arguments",
            properties.len()
        ));
    }
    for name in properties.keys() {
        check_parameter_name(name)?;
    }
    if let Some(required) = object.get("required") {
        let names = required
            .as_array()
            .ok_or("input_schema's \"required\" must be a list of property names")?;
        for name in names {
            match name.as_str() {
                Some(name) if properties.contains_key(name) => {}
                _ => {
                    return Err(format!(
                        "input_schema requires {name}, which is not one of its properties"
                    ));
                }
            }
        }
    }
    Ok(())
}

/// A property name must be usable as a parameter of `run`.
fn check_parameter_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !first_ok || !rest_ok || name.len() > 64 || name.starts_with("__") {
        return Err(format!(
            "the property {name:?} cannot be a parameter of run(): use a Python name such as \"start_date\" (letters, digits and _, at most 64)"
        ));
    }
    if PYTHON_KEYWORDS.contains(&name) {
        return Err(format!(
            "the property {name:?} is a Python keyword and cannot be a parameter of run()"
        ));
    }
    Ok(())
}

/// The example arguments of a schema: its first `examples` entry, or `{}` when nothing is
/// required.
pub fn first_example(schema: &Map<String, Value>) -> Result<Map<String, Value>, String> {
    match schema.get("examples").and_then(Value::as_array).and_then(|e| e.first()) {
        Some(Value::Object(example)) => Ok(example.clone()),
        Some(_) => Err("input_schema's first \"examples\" entry must be an arguments object".into()),
        None if schema
            .get("required")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty) =>
        {
            Ok(Map::new())
        }
        None => Err(
            "give example arguments for the test call: example_arguments, or an \"examples\" list in input_schema"
                .into(),
        ),
    }
}

/// Compiled validators of saved tools, one per version (the version hashes the schema, so a
/// version's validator never changes), at most [`MAX_CACHED_VALIDATORS`].
#[derive(Debug, Default)]
pub struct Validators {
    by_version: Mutex<HashMap<String, Arc<jsonschema::Validator>>>,
}

impl Validators {
    /// The validator of `version`, if compiled before.
    pub fn get(&self, version: &str) -> Option<Arc<jsonschema::Validator>> {
        self.by_version
            .lock()
            .ok()
            .and_then(|cache| cache.get(version).cloned())
    }

    /// Keeps `validator` as the one of `version`.
    pub fn insert(&self, version: &str, validator: Arc<jsonschema::Validator>) {
        let Ok(mut cache) = self.by_version.lock() else {
            return;
        };
        if cache.len() >= MAX_CACHED_VALIDATORS && !cache.contains_key(version) {
            let evicted = cache.keys().next().cloned();
            if let Some(evicted) = evicted {
                cache.remove(&evicted);
            }
        }
        cache.insert(version.to_string(), validator);
    }

    /// Validators kept.
    pub fn len(&self) -> usize {
        self.by_version.lock().map_or(0, |cache| cache.len())
    }

    /// Whether none is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The validator of a schema that [`check_schema`] accepted when it was saved. Blocking work.
pub fn compile_saved(schema: &Map<String, Value>) -> Result<jsonschema::Validator, String> {
    compile(&Value::Object(schema.clone()))
}

/// Checks `arguments` with `validator`; the error names each bad field (at most a few).
pub fn check_arguments(validator: &jsonschema::Validator, arguments: &Value) -> Result<(), String> {
    mismatches(validator, arguments, "the arguments")
}

/// Checks what `run()` returned with the validator of the tool's output schema; the error
/// says that it does not fit and names each bad field (at most a few).
pub fn check_result(validator: &jsonschema::Validator, result: &Value) -> Result<(), String> {
    mismatches(validator, result, "the result").map_err(|errors| {
        format!("run() returned a value that does not fit the tool's output_schema: {errors}")
    })
}

/// Checks `instance` with `validator`; the error names each bad field (at most a few), the
/// instance itself as `whole`.
fn mismatches(
    validator: &jsonschema::Validator,
    instance: &Value,
    whole: &str,
) -> Result<(), String> {
    let errors: Vec<String> = validator
        .iter_errors(instance)
        .take(MAX_ERRORS)
        .map(|error| {
            let path = error.instance_path().to_string();
            let field = if path.is_empty() {
                whole.to_string()
            } else {
                format!("`{}`", path.trim_start_matches('/').replace('/', "."))
            };
            format!("{field}: {error}")
        })
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}

/// Refuses a schema that is too large, too deep, or uses a key of [`REFUSED_KEYS`].
fn check_shape(schema: &Value, field: &str) -> Result<(), String> {
    let mut stack = vec![(schema, 1usize)];
    let mut nodes = 0usize;
    let mut patterns = 0usize;
    while let Some((value, depth)) = stack.pop() {
        nodes += 1;
        if nodes > MAX_SCHEMA_NODES {
            return Err(format!(
                "{field} has more than {MAX_SCHEMA_NODES} values; make it smaller"
            ));
        }
        if depth > MAX_DEPTH {
            return Err(format!("{field} nests deeper than {MAX_DEPTH} levels"));
        }
        match value {
            Value::Object(map) => {
                for (key, child) in map {
                    if REFUSED_KEYS.contains(&key.as_str()) {
                        return Err(format!(
                            "{field} uses {key:?}, which a tool's schema may not: write the schema out in full, without references or ids"
                        ));
                    }
                    // Counted wherever the key appears (also as a property's name): a
                    // schema is refused a little early rather than compiled too often.
                    patterns += match (key.as_str(), child) {
                        ("pattern", Value::String(_)) => 1,
                        ("patternProperties", Value::Object(entries)) => entries.len(),
                        _ => 0,
                    };
                    if patterns > MAX_PATTERNS {
                        return Err(format!(
                            "{field} has more than {MAX_PATTERNS} patterns (`pattern` and `patternProperties`); use fewer, or check the strings in run()"
                        ));
                    }
                    stack.push((child, depth + 1));
                }
            }
            Value::Array(items) => stack.extend(items.iter().map(|item| (item, depth + 1))),
            _ => {}
        }
    }
    Ok(())
}

/// The draft a schema is written in: 2020-12 unless its `$schema` names draft 7.
fn draft_of(schema: &Map<String, Value>, field: &str) -> Result<jsonschema::Draft, String> {
    match schema
        .get("$schema")
        .map(|uri| uri.as_str().unwrap_or_default())
    {
        None | Some("https://json-schema.org/draft/2020-12/schema") => {
            Ok(jsonschema::Draft::Draft202012)
        }
        Some(
            "http://json-schema.org/draft-07/schema#" | "http://json-schema.org/draft-07/schema",
        ) => Ok(jsonschema::Draft::Draft7),
        Some(other) => Err(format!(
            "{field}'s $schema {other:?} is not one file-agent reads: leave it out (draft 2020-12) or name draft 2020-12 or draft 7"
        )),
    }
}

/// The validator of a checked schema: offline, linear-time patterns within their size caps.
fn compile(schema: &Value) -> Result<jsonschema::Validator, String> {
    let object = schema
        .as_object()
        .ok_or("input_schema must be a JSON object")?;
    jsonschema::options()
        .with_draft(draft_of(object, "the schema")?)
        .offline()
        .with_pattern_options(
            jsonschema::PatternOptions::regex()
                .size_limit(REGEX_SIZE_LIMIT)
                .dfa_size_limit(REGEX_DFA_SIZE_LIMIT),
        )
        .build(schema)
        .map_err(|error| format!("input_schema cannot be used: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_output_schema_is_checked_like_an_input_schema_and_results_against_it() {
        let schema = json!({"type": "object", "properties": {"sum": {"type": "integer"}}, "required": ["sum"]});
        let (_, validator) = check_output_schema(&schema).unwrap();
        assert!(check_result(&validator, &json!({"sum": 3})).is_ok());
        let error = check_result(&validator, &json!({"sum": "3"})).unwrap_err();
        assert!(
            error.contains("output_schema") && error.contains("`sum`"),
            "{error}"
        );
        let error = check_output_schema(&json!({"type": "integer"})).unwrap_err();
        assert!(error.contains("\"type\": \"object\""), "{error}");
        let error = check_output_schema(&json!({"type": "object", "$ref": "#/x"})).unwrap_err();
        assert!(error.starts_with("output_schema uses \"$ref\""), "{error}");
        let error =
            check_output_schema(&json!({"type": "object", "minProperties": "x"})).unwrap_err();
        assert!(
            error.starts_with("output_schema is not a valid JSON Schema"),
            "{error}"
        );
    }

    #[test]
    fn names_are_lower_case_identifiers() {
        for good in ["a", "compound_interest", "x9_"] {
            check_name(good).unwrap();
        }
        for bad in ["", "A", "9a", "_a", "a-b", "ä", &"a".repeat(49)] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_schema_must_be_a_bounded_object_schema_of_python_names() {
        let good = json!({"type": "object", "properties": {"rate": {"type": "number"}}, "required": ["rate"]});
        check_schema(&good).unwrap();
        let refused = [
            (json!([1]), "must be a JSON object"),
            (json!({"type": "array"}), "\"type\": \"object\""),
            (
                json!({"type": "object", "properties": {"class": {}}}),
                "Python keyword",
            ),
            (
                json!({"type": "object", "properties": {"start-date": {}}}),
                "cannot be a parameter",
            ),
            (
                json!({"type": "object", "properties": {"a": {}}, "required": ["b"]}),
                "not one of its properties",
            ),
            (
                json!({"type": "object", "properties": {"a": {"$ref": "https://example.com/s.json"}}}),
                "without references",
            ),
            (
                json!({"type": "object", "$defs": {"a": {"allOf": [{"$ref": "#/$defs/b"}, {"$ref": "#/$defs/b"}]}}}),
                "without references",
            ),
            (
                json!({"$schema": "https://example.com/meta", "type": "object"}),
                "not one file-agent reads",
            ),
            (
                json!({"type": "object", "properties": {"a": {"type": "string", "pattern": "(?=a)a"}}}),
                "cannot be used",
            ),
            (
                json!({"type": "object", "properties": {"a": {"type": "no-such-type"}}}),
                "not a valid JSON Schema",
            ),
        ];
        for (schema, words) in refused {
            let error = check_schema(&schema).unwrap_err();
            assert!(error.contains(words), "{schema}: {error}");
        }
        let many: Map<String, Value> = (0..10_000)
            .map(|n| (format!("p{n}"), json!({"type": "integer"})))
            .collect();
        let error = check_schema(&json!({"type": "object", "properties": many})).unwrap_err();
        assert!(error.contains("KiB") || error.contains("values"), "{error}");
        check_schema(&json!({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "properties": {"a": {"type": "integer"}}})).unwrap();
        let mut deep = json!({"type": "string"});
        for _ in 0..40 {
            deep = json!({"type": "array", "items": deep});
        }
        let error =
            check_schema(&json!({"type": "object", "properties": {"a": deep}})).unwrap_err();
        assert!(error.contains("deeper"), "{error}");
    }

    /// The red team's schema: one string whose `allOf` has `count` patterns `\w{3000}`,
    /// `\w{3001}`, ...
    fn costly_schema(count: usize) -> Value {
        let all_of: Vec<Value> = (0..count)
            .map(|n| json!({"pattern": format!("\\w{{{}}}", 3000 + n)}))
            .collect();
        json!({"type": "object", "properties": {"s": {"type": "string", "allOf": all_of}}})
    }

    #[test]
    fn patterns_are_capped_in_number_and_in_compiled_size() {
        let started = std::time::Instant::now();
        let issue = costly_schema(1000);
        assert!(serde_json::to_vec(&issue).unwrap().len() > 20_000);
        let error = check_schema(&issue).unwrap_err();
        assert!(error.contains("patterns"), "{error}");
        // Within the count, each one is still too large to compile.
        let error = check_schema(&costly_schema(MAX_PATTERNS)).unwrap_err();
        assert!(error.contains("cannot be used"), "{error}");
        let took = started.elapsed();
        assert!(took < std::time::Duration::from_secs(2), "took {took:?}");
        // patternProperties entries count too.
        let entries: Map<String, Value> = (0..=MAX_PATTERNS)
            .map(|n| (format!("^p{n}$"), json!({})))
            .collect();
        let error =
            check_schema(&json!({"type": "object", "patternProperties": entries})).unwrap_err();
        assert!(error.contains("patterns"), "{error}");
        // Patterns of real tools compile well within the caps.
        let (_, real) = check_schema(&json!({"type": "object", "properties": {
            "email": {"type": "string", "pattern": "^[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\\.[A-Za-z]{2,}$"},
            "day": {"type": "string", "pattern": "^\\d{4}-\\d{2}-\\d{2}$"},
            "word": {"type": "string", "pattern": "^\\w{1,64}$"},
        }}))
        .unwrap();
        check_arguments(
            &real,
            &json!({"email": "a@b.org", "day": "2026-01-31", "word": "zurich"}),
        )
        .unwrap();
        assert!(check_arguments(&real, &json!({"day": "31.1.2026"})).is_err());
    }

    #[test]
    fn format_is_asserted_under_draft_7_only_and_stays_cheap_on_hostile_values() {
        let schema = |draft: Option<&str>| {
            let mut schema = json!({"type": "object", "properties": {
                "mail": {"type": "string", "format": "email"},
                "pattern": {"type": "string", "format": "regex"},
                "host": {"type": "string", "format": "idn-hostname"},
                "when": {"type": "string", "format": "date-time"},
                "link": {"type": "string", "format": "iri"},
            }});
            if let Some(draft) = draft {
                schema["$schema"] = json!(draft);
            }
            check_schema(&schema).unwrap().1
        };
        let draft7 = schema(Some("http://json-schema.org/draft-07/schema#"));
        let draft2020 = schema(None);
        let bad = json!({"mail": "not an address", "when": "yesterday"});
        let error = check_arguments(&draft7, &bad).unwrap_err();
        assert!(
            error.contains("`mail`") && error.contains("`when`"),
            "{error}"
        );
        // Under 2020-12 `format` is an annotation, as that draft says.
        check_arguments(&draft2020, &bad).unwrap();
        // Values at the arguments' size cap, built to be slow for each format's check.
        let long = 60 * 1024;
        let hostile = [
            ("pattern", "(".repeat(long / 2) + &")".repeat(long / 2)),
            ("pattern", "a{99999}{99999}".repeat(long / 15)),
            ("host", format!("{}.", "\u{00e9}a-".repeat(long / 4))),
            (
                "mail",
                format!("{}@{}", "a.".repeat(long / 4), "b.".repeat(long / 4)),
            ),
            ("when", "9".repeat(long)),
            ("link", format!("http://{}", "%41".repeat(long / 3))),
        ];
        let started = std::time::Instant::now();
        for (field, value) in hostile {
            let _ = check_arguments(&draft7, &json!({field: value}));
        }
        let took = started.elapsed();
        assert!(took < std::time::Duration::from_secs(2), "took {took:?}");
    }

    #[test]
    fn a_validator_is_kept_per_version_within_the_cap() {
        let validators = Validators::default();
        let (schema, validator) = check_schema(&json!({"type": "object"})).unwrap();
        let validator = Arc::new(validator);
        validators.insert("v1", validator.clone());
        assert!(validators.get("v1").is_some() && validators.get("v2").is_none());
        for n in 0..MAX_CACHED_VALIDATORS + 10 {
            validators.insert(&format!("x{n}"), Arc::new(compile_saved(&schema).unwrap()));
        }
        assert_eq!(validators.len(), MAX_CACHED_VALIDATORS);
    }

    #[test]
    fn argument_errors_name_the_field() {
        let (_, schema) = check_schema(&json!({
            "type": "object",
            "properties": {"count": {"type": "integer", "minimum": 1}},
            "required": ["count"],
            "additionalProperties": false
        }))
        .unwrap();
        check_arguments(&schema, &json!({"count": 3})).unwrap();
        let error = check_arguments(&schema, &json!({"count": "x"})).unwrap_err();
        assert!(
            error.starts_with("`count`:") && error.contains("integer"),
            "{error}"
        );
        let error = check_arguments(&schema, &json!({"count": 0})).unwrap_err();
        assert!(
            error.contains("`count`") && error.contains("minimum"),
            "{error}"
        );
        let error = check_arguments(&schema, &json!({})).unwrap_err();
        assert!(
            error.contains("the arguments") && error.contains("count"),
            "{error}"
        );
        let error = check_arguments(&schema, &json!({"count": 1, "extra": 2})).unwrap_err();
        assert!(error.contains("extra"), "{error}");
    }

    #[test]
    fn the_example_comes_from_the_schema_unless_nothing_is_required() {
        let with = json!({"type": "object", "properties": {"a": {}}, "required": ["a"], "examples": [{"a": 1}]});
        assert_eq!(
            Value::Object(first_example(with.as_object().unwrap()).unwrap()),
            json!({"a": 1})
        );
        let optional = json!({"type": "object", "properties": {"a": {}}});
        assert!(
            first_example(optional.as_object().unwrap())
                .unwrap()
                .is_empty()
        );
        let missing = json!({"type": "object", "properties": {"a": {}}, "required": ["a"]});
        assert!(first_example(missing.as_object().unwrap()).is_err());
    }
}
