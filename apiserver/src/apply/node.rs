//! What each place in an object is to server-side apply: a struct or map
//! tracked field by field, a list merged by key or as a set, or an atomic
//! value owned whole. Read from the schema, the list strategies and the
//! few atomic markers Kubernetes puts on structs and maps.

use std::collections::HashMap;
use std::sync::LazyLock;

use crate::patch::{list_strategy, ListStrategy};
use crate::schema::{field_of, fields_of, Shape};

/// What the schema says about the value at one place in an object.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Node {
    /// Owned and replaced whole: scalars, lists without a merge strategy,
    /// structs and maps Kubernetes marks atomic.
    Atomic,
    /// A struct or map whose fields (keys) are tracked one by one.
    Object(Shape<'static>),
    /// A list of objects merged item by item on `key`; items are objects of
    /// the definition `items`.
    Keyed {
        key: &'static str,
        items: Option<&'static str>,
    },
    /// A list of scalars merged as a set.
    Set,
}

/// Structs Kubernetes declares `+structType=atomic`
/// (`x-kubernetes-map-type: atomic`), which k8s-openapi's schema does not
/// carry: a manager owns them whole, like a scalar.
const ATOMIC_STRUCTS: &[&str] = &[
    "io.k8s.api.core.v1.ConfigMapKeySelector",
    "io.k8s.api.core.v1.LocalObjectReference",
    "io.k8s.api.core.v1.NodeSelector",
    "io.k8s.api.core.v1.NodeSelectorTerm",
    "io.k8s.api.core.v1.ObjectFieldSelector",
    "io.k8s.api.core.v1.ObjectReference",
    "io.k8s.api.core.v1.ResourceFieldSelector",
    "io.k8s.api.core.v1.SecretKeySelector",
    "io.k8s.api.core.v1.SecretReference",
    "io.k8s.api.core.v1.TopologySelectorTerm",
    "io.k8s.api.core.v1.TypedLocalObjectReference",
    "io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector",
];

/// Maps declared `+mapType=atomic`, by (owning definition, field): the
/// `map::atomic` merges of k8s-openapi's `DeepMerge` impls.
const ATOMIC_MAPS: &[(&str, &str)] = &[
    ("io.k8s.api.core.v1.PodSpec", "nodeSelector"),
    ("io.k8s.api.core.v1.ReplicationControllerSpec", "selector"),
    ("io.k8s.api.core.v1.ServiceSpec", "selector"),
    ("io.k8s.api.node.v1.Scheduling", "nodeSelector"),
];

/// [`Node::field`] of every field of every definition, worked out once:
/// it runs for every field of every object written (each create's
/// managedFields), and the schema, atomic-map and list-strategy lookups
/// behind it were half of that walk's time.
static FIELD_NODES: LazyLock<HashMap<&'static str, HashMap<&'static str, Node>>> =
    LazyLock::new(|| {
        crate::schema::DEFINITIONS
            .keys()
            .filter_map(|owner| {
                let fields = fields_of(owner)?
                    .keys()
                    .map(|&name| (name, Node::of_field(Some(owner.as_str()), name)))
                    .collect();
                Some((owner.as_str(), fields))
            })
            .collect()
    });

impl Node {
    /// The top of an object of the definition `definition`.
    pub(crate) fn root(definition: &'static str) -> Node {
        Node::object(Some(definition))
    }

    fn object(definition: Option<&'static str>) -> Node {
        match definition {
            Some(d) if ATOMIC_STRUCTS.contains(&d) => Node::Atomic,
            _ => Node::Object(Shape::Struct(definition)),
        }
    }

    /// The field (or map key) `name` of an object at this node.
    pub(crate) fn field(self, name: &str) -> Node {
        let Node::Object(shape) = self else {
            return Node::Atomic;
        };
        match shape {
            Shape::Struct(Some(owner)) => FIELD_NODES
                .get(owner)
                .and_then(|fields| fields.get(name).copied())
                .unwrap_or_else(|| Node::of_field(Some(owner), name)),
            Shape::Struct(None) => Node::of_field(None, name),
            // A map's values are all of one definition; none is a list.
            Shape::Values(of) => Node::object(of),
        }
    }

    /// [`Node::field`] of a struct, worked out from the schema.
    fn of_field(owner: Option<&'static str>, name: &str) -> Node {
        if owner.is_some_and(|o| ATOMIC_MAPS.contains(&(o, name))) {
            return Node::Atomic;
        }
        let field = field_of(owner, name);
        match owner.and_then(|o| list_strategy(o, name)) {
            Some(ListStrategy::MergeByKey(key)) => Node::Keyed {
                key,
                items: field.items,
            },
            Some(ListStrategy::SetOfPrimitives) => Node::Set,
            None => match field.shape {
                Shape::Struct(definition) => Node::object(definition),
                values @ Shape::Values(_) => Node::Object(values),
            },
        }
    }

    /// An item of a keyed list at this node.
    pub(crate) fn item(self) -> Node {
        match self {
            Node::Keyed { items, .. } => Node::object(items),
            _ => Node::Atomic,
        }
    }

    /// A map (not a struct): its existence is tracked apart from its keys
    /// (`.` in FieldsV1) when a write creates it.
    pub(crate) fn is_map(self) -> bool {
        matches!(self, Node::Object(Shape::Values(_)))
    }
}

#[cfg(test)]
pub(super) fn atomic_definitions() -> impl Iterator<Item = &'static str> {
    ATOMIC_STRUCTS
        .iter()
        .copied()
        .chain(ATOMIC_MAPS.iter().map(|(d, _)| *d))
}
