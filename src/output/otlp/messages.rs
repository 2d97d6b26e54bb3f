//! The OTLP profiles messages of opentelemetry-proto v1.10.0, field for
//! field as the `.proto` files beside this module (`proto/`) define them,
//! encoded by prost: no protoc at build time. Every message bprof sends or
//! reads is here whole, unused fields included, so nothing a receiver sends
//! back is misread as another field.

use prost::Message;

/// common.v1 `AnyValue`.
#[derive(Clone, PartialEq, Message)]
pub struct AnyValue {
    /// The value, one of several kinds.
    #[prost(oneof = "any_value::Value", tags = "1, 2, 3, 4, 5, 6, 7, 8")]
    pub value: Option<any_value::Value>,
}

/// `AnyValue`'s oneof.
pub mod any_value {
    /// common.v1 `AnyValue.value`.
    // The variants are the .proto's field names, as generated code has them.
    #[allow(clippy::enum_variant_names)]
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Value {
        /// A string.
        #[prost(string, tag = "1")]
        StringValue(String),
        /// A boolean.
        #[prost(bool, tag = "2")]
        BoolValue(bool),
        /// An integer.
        #[prost(int64, tag = "3")]
        IntValue(i64),
        /// A double.
        #[prost(double, tag = "4")]
        DoubleValue(f64),
        /// A list.
        #[prost(message, tag = "5")]
        ArrayValue(super::ArrayValue),
        /// A map.
        #[prost(message, tag = "6")]
        KvlistValue(super::KeyValueList),
        /// Bytes.
        #[prost(bytes, tag = "7")]
        BytesValue(Vec<u8>),
        /// A string of the profiles dictionary's string table.
        #[prost(int32, tag = "8")]
        StringValueStrindex(i32),
    }
}

/// common.v1 `ArrayValue`.
#[derive(Clone, PartialEq, Message)]
pub struct ArrayValue {
    /// The values.
    #[prost(message, repeated, tag = "1")]
    pub values: Vec<AnyValue>,
}

/// common.v1 `KeyValueList`.
#[derive(Clone, PartialEq, Message)]
pub struct KeyValueList {
    /// The pairs.
    #[prost(message, repeated, tag = "1")]
    pub values: Vec<KeyValue>,
}

/// common.v1 `KeyValue`.
#[derive(Clone, PartialEq, Message)]
pub struct KeyValue {
    /// The key.
    #[prost(string, tag = "1")]
    pub key: String,
    /// The value.
    #[prost(message, optional, tag = "2")]
    pub value: Option<AnyValue>,
    /// The key as a string-table index (profiles only), instead of `key`.
    #[prost(int32, tag = "3")]
    pub key_strindex: i32,
}

/// common.v1 `InstrumentationScope`.
#[derive(Clone, PartialEq, Message)]
pub struct InstrumentationScope {
    /// Its name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Its version.
    #[prost(string, tag = "2")]
    pub version: String,
    /// Its attributes.
    #[prost(message, repeated, tag = "3")]
    pub attributes: Vec<KeyValue>,
    /// Attributes left out.
    #[prost(uint32, tag = "4")]
    pub dropped_attributes_count: u32,
}

/// common.v1 `EntityRef`.
#[derive(Clone, PartialEq, Message)]
pub struct EntityRef {
    /// Schema URL.
    #[prost(string, tag = "1")]
    pub schema_url: String,
    /// Entity type.
    #[prost(string, tag = "2")]
    pub r#type: String,
    /// Identifying attribute keys.
    #[prost(string, repeated, tag = "3")]
    pub id_keys: Vec<String>,
    /// Descriptive attribute keys.
    #[prost(string, repeated, tag = "4")]
    pub description_keys: Vec<String>,
}

/// resource.v1 `Resource`.
#[derive(Clone, PartialEq, Message)]
pub struct Resource {
    /// What describes the resource: host, process, service.
    #[prost(message, repeated, tag = "1")]
    pub attributes: Vec<KeyValue>,
    /// Attributes left out.
    #[prost(uint32, tag = "2")]
    pub dropped_attributes_count: u32,
    /// Entities the resource belongs to.
    #[prost(message, repeated, tag = "3")]
    pub entity_refs: Vec<EntityRef>,
}

/// profiles.v1development `ProfilesDictionary`: tables shared by every
/// profile of a request; entry 0 of each is the zero value.
#[derive(Clone, PartialEq, Message)]
pub struct ProfilesDictionary {
    /// Mappings.
    #[prost(message, repeated, tag = "1")]
    pub mapping_table: Vec<Mapping>,
    /// Locations.
    #[prost(message, repeated, tag = "2")]
    pub location_table: Vec<Location>,
    /// Functions.
    #[prost(message, repeated, tag = "3")]
    pub function_table: Vec<Function>,
    /// Trace links.
    #[prost(message, repeated, tag = "4")]
    pub link_table: Vec<Link>,
    /// Strings.
    #[prost(string, repeated, tag = "5")]
    pub string_table: Vec<String>,
    /// Attributes.
    #[prost(message, repeated, tag = "6")]
    pub attribute_table: Vec<KeyValueAndUnit>,
    /// Stacks.
    #[prost(message, repeated, tag = "7")]
    pub stack_table: Vec<Stack>,
}

/// profiles.v1development `ResourceProfiles`.
#[derive(Clone, PartialEq, Message)]
pub struct ResourceProfiles {
    /// Whose profiles these are.
    #[prost(message, optional, tag = "1")]
    pub resource: Option<Resource>,
    /// Profiles by instrumentation scope.
    #[prost(message, repeated, tag = "2")]
    pub scope_profiles: Vec<ScopeProfiles>,
    /// Schema URL of the resource.
    #[prost(string, tag = "3")]
    pub schema_url: String,
}

/// profiles.v1development `ScopeProfiles`.
#[derive(Clone, PartialEq, Message)]
pub struct ScopeProfiles {
    /// What made the profiles.
    #[prost(message, optional, tag = "1")]
    pub scope: Option<InstrumentationScope>,
    /// The profiles.
    #[prost(message, repeated, tag = "2")]
    pub profiles: Vec<Profile>,
    /// Schema URL of the profiles.
    #[prost(string, tag = "3")]
    pub schema_url: String,
}

/// profiles.v1development `Profile`.
#[derive(Clone, PartialEq, Message)]
pub struct Profile {
    /// What every sample value counts.
    #[prost(message, optional, tag = "1")]
    pub sample_type: Option<ValueType>,
    /// The samples.
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<Sample>,
    /// Start, ns since the epoch.
    #[prost(fixed64, tag = "3")]
    pub time_unix_nano: u64,
    /// Length, ns.
    #[prost(uint64, tag = "4")]
    pub duration_nano: u64,
    /// What one sampling period is in.
    #[prost(message, optional, tag = "5")]
    pub period_type: Option<ValueType>,
    /// The sampling period.
    #[prost(int64, tag = "6")]
    pub period: i64,
    /// 16 random bytes, or empty.
    #[prost(bytes = "vec", tag = "7")]
    pub profile_id: Vec<u8>,
    /// Attributes left out.
    #[prost(uint32, tag = "8")]
    pub dropped_attributes_count: u32,
    /// Format of `original_payload`.
    #[prost(string, tag = "9")]
    pub original_payload_format: String,
    /// The profile as first recorded, if kept.
    #[prost(bytes = "vec", tag = "10")]
    pub original_payload: Vec<u8>,
    /// Attribute-table indices.
    #[prost(int32, repeated, tag = "11")]
    pub attribute_indices: Vec<i32>,
}

/// profiles.v1development `Link`.
#[derive(Clone, PartialEq, Message)]
pub struct Link {
    /// Trace id.
    #[prost(bytes = "vec", tag = "1")]
    pub trace_id: Vec<u8>,
    /// Span id.
    #[prost(bytes = "vec", tag = "2")]
    pub span_id: Vec<u8>,
}

/// profiles.v1development `ValueType`.
#[derive(Clone, PartialEq, Message)]
pub struct ValueType {
    /// String index, e.g. "samples".
    #[prost(int32, tag = "1")]
    pub type_strindex: i32,
    /// String index, e.g. "count".
    #[prost(int32, tag = "2")]
    pub unit_strindex: i32,
}

/// profiles.v1development `Sample`.
#[derive(Clone, PartialEq, Message)]
pub struct Sample {
    /// Stack-table index.
    #[prost(int32, tag = "1")]
    pub stack_index: i32,
    /// Attribute-table indices.
    #[prost(int32, repeated, tag = "2")]
    pub attribute_indices: Vec<i32>,
    /// Link-table index.
    #[prost(int32, tag = "3")]
    pub link_index: i32,
    /// Values, of the profile's sample type.
    #[prost(int64, repeated, tag = "4")]
    pub values: Vec<i64>,
    /// Per-value timestamps, if any.
    #[prost(fixed64, repeated, tag = "5")]
    pub timestamps_unix_nano: Vec<u64>,
}

/// profiles.v1development `Mapping`.
#[derive(Clone, PartialEq, Message)]
pub struct Mapping {
    /// First address.
    #[prost(uint64, tag = "1")]
    pub memory_start: u64,
    /// One past the last address.
    #[prost(uint64, tag = "2")]
    pub memory_limit: u64,
    /// File offset of `memory_start`.
    #[prost(uint64, tag = "3")]
    pub file_offset: u64,
    /// String index of the file name.
    #[prost(int32, tag = "4")]
    pub filename_strindex: i32,
    /// Attribute-table indices (the build ID).
    #[prost(int32, repeated, tag = "5")]
    pub attribute_indices: Vec<i32>,
}

/// profiles.v1development `Stack`.
#[derive(Clone, PartialEq, Eq, Hash, Message)]
pub struct Stack {
    /// Location-table indices, leaf first.
    #[prost(int32, repeated, tag = "1")]
    pub location_indices: Vec<i32>,
}

/// profiles.v1development `Location`.
#[derive(Clone, PartialEq, Message)]
pub struct Location {
    /// Mapping-table index, 0 for none.
    #[prost(int32, tag = "1")]
    pub mapping_index: i32,
    /// The address (a file offset in a file's mapping).
    #[prost(uint64, tag = "2")]
    pub address: u64,
    /// Functions at the address, innermost (inlined) first.
    #[prost(message, repeated, tag = "3")]
    pub lines: Vec<Line>,
    /// Attribute-table indices (the frame type).
    #[prost(int32, repeated, tag = "4")]
    pub attribute_indices: Vec<i32>,
}

/// profiles.v1development `Line`.
#[derive(Clone, PartialEq, Message)]
pub struct Line {
    /// Function-table index.
    #[prost(int32, tag = "1")]
    pub function_index: i32,
    /// Source line, 0 when unknown.
    #[prost(int64, tag = "2")]
    pub line: i64,
    /// Source column, 0 when unknown.
    #[prost(int64, tag = "3")]
    pub column: i64,
}

/// profiles.v1development `Function`.
#[derive(Clone, PartialEq, Message)]
pub struct Function {
    /// String index of the (demangled) name.
    #[prost(int32, tag = "1")]
    pub name_strindex: i32,
    /// String index of the symbol-table name.
    #[prost(int32, tag = "2")]
    pub system_name_strindex: i32,
    /// String index of the source file.
    #[prost(int32, tag = "3")]
    pub filename_strindex: i32,
    /// First line, 0 when unknown.
    #[prost(int64, tag = "4")]
    pub start_line: i64,
}

/// profiles.v1development `KeyValueAndUnit`.
#[derive(Clone, PartialEq, Message)]
pub struct KeyValueAndUnit {
    /// String index of the key.
    #[prost(int32, tag = "1")]
    pub key_strindex: i32,
    /// The value.
    #[prost(message, optional, tag = "2")]
    pub value: Option<AnyValue>,
    /// String index of the unit, 0 for none.
    #[prost(int32, tag = "3")]
    pub unit_strindex: i32,
}

/// collector.profiles.v1development `ExportProfilesServiceRequest`.
#[derive(Clone, PartialEq, Message)]
pub struct ExportProfilesServiceRequest {
    /// Profiles by resource.
    #[prost(message, repeated, tag = "1")]
    pub resource_profiles: Vec<ResourceProfiles>,
    /// The tables they refer to.
    #[prost(message, optional, tag = "2")]
    pub dictionary: Option<ProfilesDictionary>,
}

/// collector.profiles.v1development `ExportProfilesServiceResponse`.
#[derive(Clone, PartialEq, Message)]
pub struct ExportProfilesServiceResponse {
    /// Set when part of the request was rejected.
    #[prost(message, optional, tag = "1")]
    pub partial_success: Option<ExportProfilesPartialSuccess>,
}

/// collector.profiles.v1development `ExportProfilesPartialSuccess`.
#[derive(Clone, PartialEq, Message)]
pub struct ExportProfilesPartialSuccess {
    /// Profiles the receiver rejected.
    #[prost(int64, tag = "1")]
    pub rejected_profiles: i64,
    /// Why, or a warning.
    #[prost(string, tag = "2")]
    pub error_message: String,
}

/// The gRPC method of the profiles service.
pub const GRPC_PATH: &str =
    "/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export";
