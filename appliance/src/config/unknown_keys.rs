//! Every unknown key of a config file, not only the first: a `serde::Deserializer` wrapper that
//! reads the `raw` structs from the YAML deserializer, steps over keys they don't take, and
//! records each with its location.
//!
//! The structs of `raw.rs` keep `deny_unknown_fields`, which stops at the first unknown key.
//! Serde hands a deserializer the field names of every struct it reads
//! (`deserialize_struct(name, FIELDS, visitor)`), so this wrapper knows each section's keys
//! from the structs themselves, with no list of its own: a key outside `FIELDS` is recorded
//! (with its line and column, the section it is in and the keys that section takes) and its
//! value skipped, and the struct only ever sees its own keys. The rest of the file is read as
//! usual, so validation then runs and its problems are listed with the unknown keys.
//!
//! Each unknown key is reported with its section (`network`, `nodes[1].machine`) and, when a
//! known key is close to it (strsim's Jaro-Winkler, at least 0.8, case and `-` for `_`
//! ignored), that key as "did you mean". A value of the wrong type or a missing required key
//! still stops serde: that is a syntax error, rendered after the unknown keys found before it.
//! One map is read by hand rather than by a struct, `install.openshift_install`'s
//! `{ release, mirror }` (`raw::RawInstaller`): an unknown key there is such an error too.
//!
//! Architecture invariant: this only changes which keys a struct is shown; every value is read
//! by the struct's own `Deserialize`, through the YAML deserializer, as without the wrapper.
//! Structs read through serde's buffering (`#[serde(flatten)]`, untagged enums) bypass it and
//! keep serde's first-error behaviour.

use std::cell::RefCell;
use std::fmt;

use serde::Deserialize;
use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, IgnoredAny, MapAccess, SeqAccess,
    VariantAccess, Visitor,
};
use serde_saphyr::{Location, Spanned};

use super::Problems;

/// A key that no struct takes, where it was written.
#[derive(Debug, Clone)]
pub struct UnknownKey {
    pub key: String,
    pub at: Location,
    /// Where it is: `network`, `nodes[1].machine`; empty at the top level.
    pub section: String,
    /// The keys that section takes.
    pub known: &'static [&'static str],
}

impl UnknownKey {
    /// The known key `key` was probably meant to be, if one is close enough.
    pub fn suggestion(&self) -> Option<&'static str> {
        suggest(&self.key, self.known)
    }
}

/// The known key most like `key`, when it is close (a typo, another case, `-` for `_`).
pub fn suggest(key: &str, known: &[&'static str]) -> Option<&'static str> {
    let normal = |s: &str| s.to_ascii_lowercase().replace('-', "_");
    let key = normal(key);
    known
        .iter()
        .map(|k| (strsim::jaro_winkler(&key, &normal(k)), *k))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| k)
}

/// Reads a `T` from `de`, stepping over (and recording in `found`) every key a struct of `T`
/// does not take. `found` gets what was found up to an error, too.
pub fn deserialize<'de, T, D>(de: D, found: &mut Vec<UnknownKey>) -> Result<T, D::Error>
where
    T: Deserialize<'de>,
    D: Deserializer<'de>,
{
    let state = RefCell::new(State {
        found: Vec::new(),
        path: Vec::new(),
    });
    let result = T::deserialize(Tolerant {
        inner: de,
        state: &state,
    });
    found.extend(state.into_inner().found);
    result
}

#[derive(Debug)]
struct State {
    found: Vec<UnknownKey>,
    /// Where the value being read is, from the top.
    path: Vec<Segment>,
}

#[derive(Debug, Clone, Copy)]
enum Segment {
    Key(&'static str),
    Index(usize),
}

impl State {
    fn section(&self) -> String {
        let mut out = String::new();
        for segment in &self.path {
            match segment {
                Segment::Key(k) => {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(k);
                }
                Segment::Index(i) => out.push_str(&format!("[{i}]")),
            }
        }
        out
    }
}

/// Runs `f` with `segment` at the end of the path.
fn within<R>(state: &RefCell<State>, segment: Segment, f: impl FnOnce() -> R) -> R {
    state.borrow_mut().path.push(segment);
    let result = f();
    state.borrow_mut().path.pop();
    result
}

/// The deserializer wrapper: like `inner`, but every struct below it sees only its own keys.
struct Tolerant<'s, D> {
    inner: D,
    state: &'s RefCell<State>,
}

/// A visitor wrapper: hands on wrapped deserializers, sequences and maps. `fields` is set when
/// the visitor is a struct's, whose map then shows it only those keys.
struct Wrap<'s, V> {
    visitor: V,
    state: &'s RefCell<State>,
    fields: Option<&'static [&'static str]>,
}

impl<'s, V> Wrap<'s, V> {
    fn new(visitor: V, state: &'s RefCell<State>) -> Self {
        Wrap {
            visitor,
            state,
            fields: None,
        }
    }
}

/// A seed wrapper: the value it reads is read through [`Tolerant`].
struct Seed<'s, S> {
    seed: S,
    state: &'s RefCell<State>,
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Seed<'_, S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<S::Value, D::Error> {
        self.seed.deserialize(Tolerant {
            inner: de,
            state: self.state,
        })
    }
}

macro_rules! forward_deserialize {
    ($($method:ident)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
            self.inner.$method(Wrap::new(visitor, self.state))
        }
    )*};
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Tolerant<'_, D> {
    type Error = D::Error;

    forward_deserialize! {
        deserialize_any deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32
        deserialize_i64 deserialize_i128 deserialize_u8 deserialize_u16 deserialize_u32
        deserialize_u64 deserialize_u128 deserialize_f32 deserialize_f64 deserialize_char
        deserialize_str deserialize_string deserialize_bytes deserialize_byte_buf
        deserialize_option deserialize_unit deserialize_seq deserialize_map
        deserialize_identifier
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        // Nothing below an ignored value is read.
        self.inner.deserialize_ignored_any(visitor)
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.inner
            .deserialize_unit_struct(name, Wrap::new(visitor, self.state))
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.inner
            .deserialize_newtype_struct(name, Wrap::new(visitor, self.state))
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.inner
            .deserialize_tuple(len, Wrap::new(visitor, self.state))
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.inner
            .deserialize_tuple_struct(name, len, Wrap::new(visitor, self.state))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        let visitor = Wrap {
            visitor,
            state: self.state,
            fields: Some(fields),
        };
        self.inner.deserialize_struct(name, fields, visitor)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.inner
            .deserialize_enum(name, variants, Wrap::new(visitor, self.state))
    }

    fn is_human_readable(&self) -> bool {
        self.inner.is_human_readable()
    }
}

macro_rules! forward_visit {
    ($($method:ident: $ty:ty)*) => {$(
        fn $method<E: de::Error>(self, v: $ty) -> Result<V::Value, E> {
            self.visitor.$method(v)
        }
    )*};
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Wrap<'_, V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.visitor.expecting(f)
    }

    forward_visit! {
        visit_bool: bool visit_i8: i8 visit_i16: i16 visit_i32: i32 visit_i64: i64
        visit_i128: i128 visit_u8: u8 visit_u16: u16 visit_u32: u32 visit_u64: u64
        visit_u128: u128 visit_f32: f32 visit_f64: f64 visit_char: char visit_str: &str
        visit_borrowed_str: &'de str visit_string: String visit_bytes: &[u8]
        visit_borrowed_bytes: &'de [u8] visit_byte_buf: Vec<u8>
    }

    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.visitor.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.visitor.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, de: D) -> Result<V::Value, D::Error> {
        self.visitor.visit_some(Tolerant {
            inner: de,
            state: self.state,
        })
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, de: D) -> Result<V::Value, D::Error> {
        self.visitor.visit_newtype_struct(Tolerant {
            inner: de,
            state: self.state,
        })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        self.visitor.visit_seq(Seq {
            seq,
            state: self.state,
            index: 0,
        })
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.visitor.visit_map(Map {
            map,
            state: self.state,
            fields: self.fields,
            current: None,
        })
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<V::Value, A::Error> {
        self.visitor.visit_enum(Enum {
            data,
            state: self.state,
        })
    }
}

struct Seq<'s, A> {
    seq: A,
    state: &'s RefCell<State>,
    index: usize,
}

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for Seq<'_, A> {
    type Error = A::Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, A::Error> {
        let state = self.state;
        let element = within(state, Segment::Index(self.index), || {
            self.seq.next_element_seed(Seed { seed, state })
        });
        self.index += 1;
        element
    }

    fn size_hint(&self) -> Option<usize> {
        self.seq.size_hint()
    }
}

/// A map; a struct's (`fields` set) shows the struct only the keys it takes.
struct Map<'s, A> {
    map: A,
    state: &'s RefCell<State>,
    fields: Option<&'static [&'static str]>,
    /// The struct's key whose value is next.
    current: Option<&'static str>,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Map<'_, A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        let Some(fields) = self.fields else {
            return self.map.next_key_seed(Seed {
                seed,
                state: self.state,
            });
        };
        loop {
            let Some(key) = self.map.next_key_seed(LocatedKey)? else {
                return Ok(None);
            };
            if let Some(&field) = fields.iter().find(|f| **f == key.value) {
                self.current = Some(field);
                return seed
                    .deserialize(de::value::StrDeserializer::<A::Error>::new(field))
                    .map(Some);
            }
            let mut state = self.state.borrow_mut();
            let section = state.section();
            state.found.push(UnknownKey {
                key: key.value,
                at: key.referenced,
                section,
                known: fields,
            });
            drop(state);
            self.map.next_value::<IgnoredAny>()?;
        }
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, A::Error> {
        let state = self.state;
        let seed = Seed { seed, state };
        match self.current.take() {
            Some(field) => within(state, Segment::Key(field), || {
                self.map.next_value_seed(seed)
            }),
            None => self.map.next_value_seed(seed),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        // Keys stepped over are not shown, so a struct's map may hold fewer than the YAML.
        match self.fields {
            Some(_) => None,
            None => self.map.size_hint(),
        }
    }
}

struct Enum<'s, A> {
    data: A,
    state: &'s RefCell<State>,
}

impl<'s, 'de, A: EnumAccess<'de>> EnumAccess<'de> for Enum<'s, A> {
    type Error = A::Error;
    type Variant = Variant<'s, A::Variant>;

    fn variant_seed<S: DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<(S::Value, Self::Variant), A::Error> {
        let state = self.state;
        let (value, variant) = self.data.variant_seed(Seed { seed, state })?;
        Ok((value, Variant { variant, state }))
    }
}

struct Variant<'s, A> {
    variant: A,
    state: &'s RefCell<State>,
}

impl<'de, A: VariantAccess<'de>> VariantAccess<'de> for Variant<'_, A> {
    type Error = A::Error;

    fn unit_variant(self) -> Result<(), A::Error> {
        self.variant.unit_variant()
    }

    fn newtype_variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<S::Value, A::Error> {
        self.variant.newtype_variant_seed(Seed {
            seed,
            state: self.state,
        })
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, A::Error> {
        self.variant
            .tuple_variant(len, Wrap::new(visitor, self.state))
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, A::Error> {
        let visitor = Wrap {
            visitor,
            state: self.state,
            fields: Some(fields),
        };
        self.variant.struct_variant(fields, visitor)
    }
}

/// A struct's key with the place it was written. The YAML deserializer gives every key's
/// location (through `Spanned`); a map some other deserializer makes up (`Spanned`'s own
/// location fields) has plain string keys, read with an unknown location.
struct LocatedKey;

impl<'de> DeserializeSeed<'de> for LocatedKey {
    type Value = Spanned<String>;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<Spanned<String>, D::Error> {
        Spanned::deserialize(PlainAsSpanned(de))
    }
}

/// Lets `Spanned` read a plain string, which it only takes inside its newtype.
struct PlainAsSpanned<D>(D);

impl<'de, D: Deserializer<'de>> Deserializer<'de> for PlainAsSpanned<D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.0.deserialize_any(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0
            .deserialize_newtype_struct(name, NewtypeOrPlain(visitor))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct seq tuple tuple_struct map struct enum identifier ignored_any
    }
}

struct NewtypeOrPlain<V>(V);

impl<'de, V: Visitor<'de>> Visitor<'de> for NewtypeOrPlain<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.expecting(f)
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, de: D) -> Result<V::Value, D::Error> {
        self.0.visit_newtype_struct(de)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<V::Value, E> {
        self.0
            .visit_newtype_struct(de::value::StrDeserializer::<E>::new(v))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<V::Value, E> {
        self.visit_str(&v)
    }
}

/// Adds `key` to `problems` as an error pointing at it, with the key it was probably meant to
/// be or else the keys its section takes.
pub fn report(problems: &mut Problems, key: &UnknownKey) {
    let (message, label) = if key.section.is_empty() {
        (
            format!("unknown key `{}`", key.key),
            "not a top-level key".to_owned(),
        )
    } else {
        (
            format!("unknown key `{}` in `{}`", key.key, key.section),
            format!("not a key of `{}`", key.section),
        )
    };
    let hint = match key.suggestion() {
        Some(known) => format!("did you mean `{known}`?"),
        None if key.section.is_empty() => {
            format!("the top level takes {}", key.known.join(", "))
        }
        None => format!("`{}` takes {}", key.section, key.known.join(", ")),
    };
    problems
        .error("config::unknown-key", key.at, message, label)
        .hint(hint);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Top {
        name: Spanned<String>,
        #[serde(default)]
        inner: Option<Spanned<Inner>>,
        #[serde(default)]
        items: Vec<Item>,
        #[serde(default, rename = "type")]
        kind: Option<String>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Inner {
        drain_timeout: Option<String>,
        #[serde(default)]
        deeper: Option<Item>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Item {
        id: u32,
        #[serde(default)]
        tags: Vec<String>,
    }

    fn read(yaml: &str) -> (Result<Top, serde_saphyr::Error>, Vec<UnknownKey>) {
        let mut found = Vec::new();
        let top = serde_saphyr::with_deserializer_from_str(yaml, |de| {
            deserialize::<Top, _>(de, &mut found)
        });
        (top, found)
    }

    fn listed(found: &[UnknownKey]) -> Vec<(String, String, usize, usize)> {
        found
            .iter()
            .map(|k| {
                let at = (k.at.line() as usize, k.at.column() as usize);
                (k.section.clone(), k.key.clone(), at.0, at.1)
            })
            .collect()
    }

    #[test]
    fn every_unknown_key_is_listed_where_it_is_and_the_rest_is_read() {
        let yaml = "\
name: a
nmae: b
inner:
  drain_timout: 5m
  drain_timeout: 2m
  deeper: { id: 7, colour: { r: 1, g: [2, 3] } }
items:
  - { id: 1, tags: [x] }
  - id: 2
    tag: y
type: t
extra: [1, 2, 3]
";
        let (top, found) = read(yaml);
        let top = top.unwrap();
        assert_eq!(
            listed(&found),
            [
                ("".into(), "nmae".into(), 2, 1),
                ("inner".into(), "drain_timout".into(), 4, 3),
                ("inner.deeper".into(), "colour".into(), 6, 20),
                ("items[1]".into(), "tag".into(), 10, 5),
                ("".into(), "extra".into(), 12, 1),
            ]
        );
        // Every known key was read, whatever came between them.
        assert_eq!(top.name.value, "a");
        let inner = top.inner.unwrap().value;
        assert_eq!(inner.drain_timeout.as_deref(), Some("2m"));
        assert_eq!(inner.deeper.unwrap().id, 7);
        assert_eq!(top.items.len(), 2);
        assert_eq!(top.items[0].tags, ["x"]);
        assert_eq!(top.items[1].id, 2);
        assert_eq!(top.kind.as_deref(), Some("t"));
        // The keys each section takes come from the struct (with its renames).
        assert_eq!(found[0].known, ["name", "inner", "items", "type"]);
        assert_eq!(found[1].known, ["drain_timeout", "deeper"]);
        assert_eq!(found[1].suggestion(), Some("drain_timeout"));
        assert_eq!(found[2].suggestion(), None);
    }

    #[test]
    fn keys_before_an_error_are_kept_and_the_error_is_serdes() {
        // `id` is missing once `idd` is stepped over: serde's error, with the unknown key found.
        let (top, found) = read("name: a\nitems:\n  - { idd: 1 }\nlater: 1\n");
        let err = top.unwrap_err().to_string();
        assert!(err.contains("missing field `id`"), "{err}");
        assert_eq!(listed(&found), [("items[0]".into(), "idd".into(), 3, 7)]);
    }

    #[test]
    fn a_file_without_unknown_keys_reads_as_without_the_wrapper() {
        let yaml = "name: a\nitems:\n  - &one { id: 1, tags: [x, y] }\n  - *one\ninner: {}\n";
        let (top, found) = read(yaml);
        assert!(found.is_empty(), "{found:?}");
        let top = top.unwrap();
        let plain: Top = serde_saphyr::from_str(yaml).unwrap();
        assert_eq!(format!("{top:?}"), format!("{plain:?}"));
    }

    #[test]
    fn a_merge_still_merges_and_the_keys_beside_it_are_checked() {
        let yaml =
            "name: a\nitems:\n  - &base { id: 1, tags: [x] }\n  - { <<: *base, id: 2, tgas: [] }\n";
        let (top, found) = read(yaml);
        assert_eq!(top.unwrap().items[1].tags, ["x"]);
        assert_eq!(listed(&found), [("items[1]".into(), "tgas".into(), 4, 25)]);
    }

    #[test]
    fn suggestions_are_close_keys_only() {
        let known = [
            "interface",
            "subnet",
            "gateway",
            "upstream_dns",
            "ntp",
            "domain_search",
        ];
        for (typo, meant) in [
            ("subnett", Some("subnet")),
            ("gatway", Some("gateway")),
            ("upstream-dns", Some("upstream_dns")),
            ("Upstream_DNS", Some("upstream_dns")),
            ("ntp_servers", Some("ntp")),
            ("domain_serach", Some("domain_search")),
            ("colour", None),
            ("x", None),
            ("", None),
        ] {
            assert_eq!(suggest(typo, &known), meant, "{typo}");
        }
    }
}
