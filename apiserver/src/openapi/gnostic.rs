//! The Swagger 2.0 document in gnostic's protobuf model
//! (`openapi.v2.Document`), the form client-go's `OpenAPISchema()` reads.
//! Values of any JSON type (defaults, enums, vendor extensions) travel as
//! YAML text, as gnostic carries them; only what skiff's document holds is
//! translated.

use serde_json::{Map, Value};

/// The messages, generated from `proto/openapiv2/OpenAPIv2.proto`.
#[allow(clippy::all, clippy::pedantic)]
pub mod pb {
    include!(concat!(env!("OUT_DIR"), "/openapi.v2.rs"));
}

/// The whole document.
pub fn document(swagger: &Value) -> pb::Document {
    pb::Document {
        swagger: text(swagger, "swagger"),
        info: Some(pb::Info {
            title: text(&swagger["info"], "title"),
            version: text(&swagger["info"], "version"),
            description: text(&swagger["info"], "description"),
            vendor_extension: extensions(&swagger["info"]),
        }),
        paths: Some(pb::Paths {
            vendor_extension: Vec::new(),
            path: entries(&swagger["paths"])
                .map(|(name, item)| pb::NamedPathItem {
                    name: name.clone(),
                    value: Some(path_item(item)),
                })
                .collect(),
        }),
        definitions: Some(pb::Definitions {
            additional_properties: named_schemas(&swagger["definitions"]),
        }),
        vendor_extension: extensions(swagger),
        ..Default::default()
    }
}

fn path_item(item: &Value) -> pb::PathItem {
    let operation = |method: &str| item.get(method).map(operation);
    pb::PathItem {
        r#ref: text(item, "$ref"),
        get: operation("get"),
        put: operation("put"),
        post: operation("post"),
        delete: operation("delete"),
        options: operation("options"),
        head: operation("head"),
        patch: operation("patch"),
        parameters: parameters(item),
        vendor_extension: extensions(item),
    }
}

fn operation(op: &Value) -> pb::Operation {
    pb::Operation {
        tags: strings(&op["tags"]),
        summary: text(op, "summary"),
        description: text(op, "description"),
        operation_id: text(op, "operationId"),
        produces: strings(&op["produces"]),
        consumes: strings(&op["consumes"]),
        parameters: parameters(op),
        responses: op.get("responses").map(|responses| pb::Responses {
            response_code: entries(responses)
                .filter(|(code, _)| !code.starts_with("x-"))
                .map(|(code, response)| pb::NamedResponseValue {
                    name: code.clone(),
                    value: Some(pb::ResponseValue {
                        oneof: Some(pb::response_value::Oneof::Response(pb::Response {
                            description: text(response, "description"),
                            schema: response.get("schema").map(|s| pb::SchemaItem {
                                oneof: Some(pb::schema_item::Oneof::Schema(schema(s))),
                            }),
                            vendor_extension: extensions(response),
                        })),
                    }),
                })
                .collect(),
            vendor_extension: extensions(responses),
        }),
        schemes: strings(&op["schemes"]),
        deprecated: op["deprecated"].as_bool().unwrap_or(false),
        vendor_extension: extensions(op),
    }
}

fn parameters(owner: &Value) -> Vec<pb::ParametersItem> {
    owner["parameters"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(parameter)
        .map(|p| pb::ParametersItem {
            oneof: Some(pb::parameters_item::Oneof::Parameter(p)),
        })
        .collect()
}

/// A body, path or query parameter; other kinds are not in skiff's
/// document and are left out.
fn parameter(p: &Value) -> Option<pb::Parameter> {
    use pb::non_body_parameter::Oneof as NonBody;
    let required = p["required"].as_bool().unwrap_or(false);
    let unique_items = p["uniqueItems"].as_bool().unwrap_or(false);
    let non_body = match p["in"].as_str()? {
        "body" => {
            return Some(pb::Parameter {
                oneof: Some(pb::parameter::Oneof::BodyParameter(pb::BodyParameter {
                    description: text(p, "description"),
                    name: text(p, "name"),
                    r#in: "body".into(),
                    required,
                    schema: p.get("schema").map(schema),
                    vendor_extension: extensions(p),
                })),
            })
        }
        "path" => NonBody::PathParameterSubSchema(pb::PathParameterSubSchema {
            required,
            r#in: "path".into(),
            description: text(p, "description"),
            name: text(p, "name"),
            r#type: text(p, "type"),
            format: text(p, "format"),
            unique_items,
            vendor_extension: extensions(p),
        }),
        "query" => NonBody::QueryParameterSubSchema(pb::QueryParameterSubSchema {
            required,
            r#in: "query".into(),
            description: text(p, "description"),
            name: text(p, "name"),
            allow_empty_value: p["allowEmptyValue"].as_bool().unwrap_or(false),
            r#type: text(p, "type"),
            format: text(p, "format"),
            unique_items,
            vendor_extension: extensions(p),
        }),
        _ => return None,
    };
    Some(pb::Parameter {
        oneof: Some(pb::parameter::Oneof::NonBodyParameter(
            pb::NonBodyParameter {
                oneof: Some(non_body),
            },
        )),
    })
}

/// One schema and, recursively, what it holds.
pub fn schema(s: &Value) -> pb::Schema {
    let number = |key: &str| s[key].as_f64().unwrap_or(0.0);
    let integer = |key: &str| s[key].as_i64().unwrap_or(0);
    let flag = |key: &str| s[key].as_bool().unwrap_or(false);
    let types = match &s["type"] {
        Value::String(one) => vec![one.clone()],
        many => strings(many),
    };
    pb::Schema {
        r#ref: text(s, "$ref"),
        format: text(s, "format"),
        title: text(s, "title"),
        description: text(s, "description"),
        default: s.get("default").map(any),
        multiple_of: number("multipleOf"),
        maximum: number("maximum"),
        exclusive_maximum: flag("exclusiveMaximum"),
        minimum: number("minimum"),
        exclusive_minimum: flag("exclusiveMinimum"),
        max_length: integer("maxLength"),
        min_length: integer("minLength"),
        pattern: text(s, "pattern"),
        max_items: integer("maxItems"),
        min_items: integer("minItems"),
        unique_items: flag("uniqueItems"),
        max_properties: integer("maxProperties"),
        min_properties: integer("minProperties"),
        required: strings(&s["required"]),
        r#enum: s["enum"]
            .as_array()
            .into_iter()
            .flatten()
            .map(any)
            .collect(),
        additional_properties: additional_properties(s).map(Box::new),
        r#type: (!types.is_empty()).then_some(pb::TypeItem { value: types }),
        items: match &s["items"] {
            Value::Array(many) => Some(pb::ItemsItem {
                schema: many.iter().map(schema).collect(),
            }),
            one @ Value::Object(_) => Some(pb::ItemsItem {
                schema: vec![schema(one)],
            }),
            _ => None,
        },
        all_of: s["allOf"]
            .as_array()
            .into_iter()
            .flatten()
            .map(schema)
            .collect(),
        properties: s.get("properties").map(|properties| pb::Properties {
            additional_properties: named_schemas(properties),
        }),
        discriminator: text(s, "discriminator"),
        read_only: flag("readOnly"),
        example: s.get("example").map(any),
        vendor_extension: extensions(s),
    }
}

/// `additionalProperties`: a schema for the values, or whether any are
/// allowed.
fn additional_properties(s: &Value) -> Option<pb::AdditionalPropertiesItem> {
    use pb::additional_properties_item::Oneof;
    let oneof = match s.get("additionalProperties")? {
        Value::Bool(allowed) => Oneof::Boolean(*allowed),
        inner @ Value::Object(_) => Oneof::Schema(Box::new(schema(inner))),
        _ => return None,
    };
    Some(pb::AdditionalPropertiesItem { oneof: Some(oneof) })
}

fn named_schemas(map: &Value) -> Vec<pb::NamedSchema> {
    entries(map)
        .map(|(name, value)| pb::NamedSchema {
            name: name.clone(),
            value: Some(schema(value)),
        })
        .collect()
}

/// The `x-` members of an object, each as YAML.
fn extensions(owner: &Value) -> Vec<pb::NamedAny> {
    entries(owner)
        .filter(|(name, _)| name.starts_with("x-"))
        .map(|(name, value)| pb::NamedAny {
            name: name.clone(),
            value: Some(any(value)),
        })
        .collect()
}

/// A JSON value as gnostic's `Any`: its YAML text.
fn any(value: &Value) -> pb::Any {
    pb::Any {
        yaml: serde_yaml::to_string(value).unwrap_or_default(),
    }
}

fn entries(map: &Value) -> impl Iterator<Item = (&String, &Value)> {
    map.as_object().into_iter().flat_map(Map::iter)
}

fn text(owner: &Value, key: &str) -> String {
    owner[key].as_str().unwrap_or_default().to_string()
}

fn strings(list: &Value) -> Vec<String> {
    list.as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect()
}
