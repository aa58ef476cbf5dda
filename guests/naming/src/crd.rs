//! The parts of a `CustomResourceDefinition` the naming controller reads, parsed from the JSON
//! the host hands over. Upstream reads Go structs, where an absent field is its zero value; the
//! same holds here (`""`, no list), except for what places a CRD at all (`spec.group` and
//! `spec.names.plural`, of which its name is made): without them the object is not a CRD this
//! controller can judge, and the error names the field. (The API server also requires a kind,
//! but upstream's own tests judge CRDs without one, so an absent kind is the empty string.)

use reconciler_guest::serde_json::{Map, Value};

/// `CustomResourceDefinitionNames`. A list is `None` when absent or `null` (Go's nil slice)
/// and `Some` when present, even empty: upstream compares them with `reflect.DeepEqual`,
/// which tells the two apart.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[allow(clippy::struct_field_names)] // upstream's field names
pub struct Names {
    pub plural: String,
    pub singular: String,
    pub short_names: Option<Vec<String>>,
    pub kind: String,
    pub list_kind: String,
    pub categories: Option<Vec<String>>,
}

impl Names {
    /// `equality.Semantic.DeepEqual`: like `==`, but an empty list equals an absent one.
    pub fn semantically_equal(&self, other: &Names) -> bool {
        let list = |l: &Option<Vec<String>>| l.clone().unwrap_or_default();
        self.plural == other.plural
            && self.singular == other.singular
            && list(&self.short_names) == list(&other.short_names)
            && self.kind == other.kind
            && self.list_kind == other.list_kind
            && list(&self.categories) == list(&other.categories)
    }

    /// As Go serialises the struct: `plural` and `kind` always, the rest when non-empty. In a
    /// merge patch an omitted field would be left alone, so it is `null` (removed) instead.
    pub fn to_merge_patch(&self) -> Value {
        let text = |s: &str| {
            if s.is_empty() {
                Value::Null
            } else {
                Value::from(s)
            }
        };
        let list = |l: &Option<Vec<String>>| match l {
            Some(items) if !items.is_empty() => Value::from(items.clone()),
            _ => Value::Null,
        };
        let mut names = Map::new();
        names.insert("plural".into(), Value::from(self.plural.as_str()));
        names.insert("singular".into(), text(&self.singular));
        names.insert("shortNames".into(), list(&self.short_names));
        names.insert("kind".into(), Value::from(self.kind.as_str()));
        names.insert("listKind".into(), text(&self.list_kind));
        names.insert("categories".into(), list(&self.categories));
        Value::Object(names)
    }
}

/// One `CustomResourceDefinitionCondition`, without its time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Condition {
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub message: String,
}

impl Condition {
    pub fn new(type_: &str, status: &str, reason: &str, message: impl Into<String>) -> Self {
        Self {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
        }
    }

    /// `apihelpers.IsCRDConditionEquivalent`: equal except for the time.
    pub fn equivalent(&self, other: Option<&Condition>) -> bool {
        other == Some(self)
    }
}

/// A CRD as the naming controller sees it.
#[derive(Clone, Debug, Default)]
pub struct Crd {
    pub name: String,
    pub group: String,
    pub spec_names: Names,
    pub accepted_names: Names,
    /// `status.conditions` as the API server has them, kept whole: a status merge patch
    /// replaces the list, so conditions other controllers own are written back unchanged.
    pub conditions: Vec<Value>,
}

/// A field missing or of the wrong type, named by its path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub path: String,
    pub problem: &'static str,
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.problem)
    }
}

impl Crd {
    /// The CRD the guest reconciles: the fields every CRD has must be there.
    pub fn parse(object: &Value) -> Result<Self, FieldError> {
        Self::read(object, true)
    }

    /// Another CRD of the list: only its name, group and accepted names are read, absent
    /// fields as Go's zero values (the cache holds what the API server validated).
    pub fn parse_other(object: &Value) -> Result<Self, FieldError> {
        Self::read(object, false)
    }

    fn read(object: &Value, strict: bool) -> Result<Self, FieldError> {
        let root = Field::root(object)?;
        let metadata = root.object("metadata", true)?;
        let spec = root.object("spec", strict)?;
        let status = root.object("status", false)?;
        let conditions = match status.get("conditions") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items.clone(),
            Some(_) => return Err(status.error("conditions", "must be a list")),
        };
        Ok(Self {
            name: metadata.string("name", true)?,
            group: spec.string("group", strict)?,
            spec_names: names(&spec.object("names", strict)?, strict)?,
            accepted_names: names(&status.object("acceptedNames", false)?, false)?,
            conditions,
        })
    }

    /// `apihelpers.FindCRDCondition`: the first condition of this type.
    pub fn condition(&self, type_: &str) -> Option<Condition> {
        self.conditions
            .iter()
            .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
            .map(|c| {
                let text = |key: &str| c.get(key).and_then(Value::as_str).unwrap_or("").to_owned();
                Condition {
                    type_: text("type"),
                    status: text("status"),
                    reason: text("reason"),
                    message: text("message"),
                }
            })
    }

    /// `apihelpers.SetCRDCondition`: replaces the condition of the same type (its time moves
    /// only when the status changes or it had none) or appends it, stamped `now`.
    pub fn set_condition(&mut self, new: &Condition, now: &str) {
        let existing = self
            .conditions
            .iter_mut()
            .find(|c| c.get("type").and_then(Value::as_str) == Some(new.type_.as_str()))
            .and_then(Value::as_object_mut);
        let Some(existing) = existing else {
            let mut condition = Map::new();
            condition.insert("type".into(), Value::from(new.type_.as_str()));
            condition.insert("status".into(), Value::from(new.status.as_str()));
            condition.insert("lastTransitionTime".into(), Value::from(now));
            insert_text(&mut condition, "reason", &new.reason);
            insert_text(&mut condition, "message", &new.message);
            self.conditions.push(Value::Object(condition));
            return;
        };
        let old_status = existing.get("status").and_then(Value::as_str).unwrap_or("");
        let no_time = existing
            .get("lastTransitionTime")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty);
        if old_status != new.status || no_time {
            existing.insert("lastTransitionTime".into(), Value::from(now));
        }
        existing.insert("status".into(), Value::from(new.status.as_str()));
        insert_text(existing, "reason", &new.reason);
        insert_text(existing, "message", &new.message);
    }
}

/// Go's `omitempty`: an empty string is not written.
fn insert_text(object: &mut Map<String, Value>, key: &str, value: &str) {
    if value.is_empty() {
        object.remove(key);
    } else {
        object.insert(key.into(), Value::from(value));
    }
}

fn names(field: &Field<'_>, strict: bool) -> Result<Names, FieldError> {
    Ok(Names {
        plural: field.string("plural", strict)?,
        singular: field.string("singular", false)?,
        short_names: field.strings("shortNames")?,
        kind: field.string("kind", false)?,
        list_kind: field.string("listKind", false)?,
        categories: field.strings("categories")?,
    })
}

/// A JSON object and its path from the root, for error messages. An absent optional object
/// reads as empty.
struct Field<'a> {
    path: String,
    value: Option<&'a Map<String, Value>>,
}

impl<'a> Field<'a> {
    fn root(object: &'a Value) -> Result<Self, FieldError> {
        match object {
            Value::Object(map) => Ok(Self {
                path: String::new(),
                value: Some(map),
            }),
            _ => Err(FieldError {
                path: "object".into(),
                problem: "must be a JSON object",
            }),
        }
    }

    fn path_of(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_owned()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    fn error(&self, key: &str, problem: &'static str) -> FieldError {
        FieldError {
            path: self.path_of(key),
            problem,
        }
    }

    fn get(&self, key: &str) -> Option<&'a Value> {
        self.value.and_then(|m| m.get(key))
    }

    fn object(&self, key: &str, required: bool) -> Result<Field<'a>, FieldError> {
        let value = match self.get(key) {
            Some(Value::Object(map)) => Some(map),
            None | Some(Value::Null) if !required => None,
            None | Some(Value::Null) => return Err(self.error(key, "missing")),
            Some(_) => return Err(self.error(key, "must be an object")),
        };
        Ok(Field {
            path: self.path_of(key),
            value,
        })
    }

    fn string(&self, key: &str, required: bool) -> Result<String, FieldError> {
        match self.get(key) {
            Some(Value::String(s)) if !(required && s.is_empty()) => Ok(s.clone()),
            Some(Value::String(_)) => Err(self.error(key, "must not be empty")),
            None | Some(Value::Null) if !required => Ok(String::new()),
            None | Some(Value::Null) => Err(self.error(key, "missing")),
            Some(_) => Err(self.error(key, "must be a string")),
        }
    }

    fn strings(&self, key: &str) -> Result<Option<Vec<String>>, FieldError> {
        match self.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Array(items)) => items
                .iter()
                .map(|item| {
                    item.as_str()
                        .map(str::to_owned)
                        .ok_or_else(|| self.error(key, "must be a list of strings"))
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(_) => Err(self.error(key, "must be a list of strings")),
        }
    }
}
