//! profile.proto's messages (github.com/google/pprof, proto/profile.proto),
//! field numbers as there, encoded by prost: no protoc at build time.

use prost::Message;

/// profile.proto's `Profile`.
#[derive(Clone, PartialEq, Message)]
pub struct Profile {
    /// What each sample value counts.
    #[prost(message, repeated, tag = "1")]
    pub sample_type: Vec<ValueType>,
    /// The samples.
    #[prost(message, repeated, tag = "2")]
    pub sample: Vec<Sample>,
    /// Mapped files.
    #[prost(message, repeated, tag = "3")]
    pub mapping: Vec<Mapping>,
    /// Distinct addresses.
    #[prost(message, repeated, tag = "4")]
    pub location: Vec<Location>,
    /// Distinct functions.
    #[prost(message, repeated, tag = "5")]
    pub function: Vec<Function>,
    /// Every string; index 0 is "".
    #[prost(string, repeated, tag = "6")]
    pub string_table: Vec<String>,
    /// Regex of frames to drop (string index).
    #[prost(int64, tag = "7")]
    pub drop_frames: i64,
    /// Regex of frames to keep (string index).
    #[prost(int64, tag = "8")]
    pub keep_frames: i64,
    /// Start of the profile, ns since the epoch.
    #[prost(int64, tag = "9")]
    pub time_nanos: i64,
    /// Length of the profile, ns.
    #[prost(int64, tag = "10")]
    pub duration_nanos: i64,
    /// What one sampling period is in.
    #[prost(message, optional, tag = "11")]
    pub period_type: Option<ValueType>,
    /// The sampling period.
    #[prost(int64, tag = "12")]
    pub period: i64,
    /// Free-form comments (string indices).
    #[prost(int64, repeated, tag = "13")]
    pub comment: Vec<i64>,
    /// The sample type shown by default (string index of its type).
    #[prost(int64, tag = "14")]
    pub default_sample_type: i64,
}

/// profile.proto's `ValueType`.
#[derive(Clone, PartialEq, Message)]
pub struct ValueType {
    /// String index, e.g. "cpu".
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    /// String index, e.g. "nanoseconds".
    #[prost(int64, tag = "2")]
    pub unit: i64,
}

/// profile.proto's `Sample`.
#[derive(Clone, PartialEq, Message)]
pub struct Sample {
    /// Location ids, leaf first.
    #[prost(uint64, repeated, tag = "1")]
    pub location_id: Vec<u64>,
    /// One value per sample type.
    #[prost(int64, repeated, tag = "2")]
    pub value: Vec<i64>,
    /// Labels (pid, tid, comm).
    #[prost(message, repeated, tag = "3")]
    pub label: Vec<Label>,
}

/// profile.proto's `Label`.
#[derive(Clone, PartialEq, Message)]
pub struct Label {
    /// String index of the key.
    #[prost(int64, tag = "1")]
    pub key: i64,
    /// String index of a string value.
    #[prost(int64, tag = "2")]
    pub str: i64,
    /// A numeric value.
    #[prost(int64, tag = "3")]
    pub num: i64,
    /// String index of the numeric value's unit.
    #[prost(int64, tag = "4")]
    pub num_unit: i64,
}

/// profile.proto's `Mapping`.
#[derive(Clone, PartialEq, Message)]
pub struct Mapping {
    /// Non-zero id.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// First address.
    #[prost(uint64, tag = "2")]
    pub memory_start: u64,
    /// One past the last address.
    #[prost(uint64, tag = "3")]
    pub memory_limit: u64,
    /// File offset of `memory_start`.
    #[prost(uint64, tag = "4")]
    pub file_offset: u64,
    /// String index of the file name.
    #[prost(int64, tag = "5")]
    pub filename: i64,
    /// String index of the build ID (hex).
    #[prost(int64, tag = "6")]
    pub build_id: i64,
    /// Locations carry function names.
    #[prost(bool, tag = "7")]
    pub has_functions: bool,
    /// Functions carry file names.
    #[prost(bool, tag = "8")]
    pub has_filenames: bool,
    /// Lines carry line numbers.
    #[prost(bool, tag = "9")]
    pub has_line_numbers: bool,
    /// Locations carry inlined functions.
    #[prost(bool, tag = "10")]
    pub has_inline_frames: bool,
}

/// profile.proto's `Location`.
#[derive(Clone, PartialEq, Message)]
pub struct Location {
    /// Non-zero id.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Its mapping, 0 for none.
    #[prost(uint64, tag = "2")]
    pub mapping_id: u64,
    /// The address.
    #[prost(uint64, tag = "3")]
    pub address: u64,
    /// Functions at the address, innermost (inlined) first.
    #[prost(message, repeated, tag = "4")]
    pub line: Vec<Line>,
    /// Several addresses folded into one.
    #[prost(bool, tag = "5")]
    pub is_folded: bool,
}

/// profile.proto's `Line`.
#[derive(Clone, PartialEq, Message)]
pub struct Line {
    /// The function.
    #[prost(uint64, tag = "1")]
    pub function_id: u64,
    /// Source line, 0 when unknown.
    #[prost(int64, tag = "2")]
    pub line: i64,
    /// Source column, 0 when unknown.
    #[prost(int64, tag = "3")]
    pub column: i64,
}

/// profile.proto's `Function`.
#[derive(Clone, PartialEq, Message)]
pub struct Function {
    /// Non-zero id.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// String index of the (demangled) name.
    #[prost(int64, tag = "2")]
    pub name: i64,
    /// String index of the name in the symbol table.
    #[prost(int64, tag = "3")]
    pub system_name: i64,
    /// String index of the source file.
    #[prost(int64, tag = "4")]
    pub filename: i64,
    /// First line of the function, 0 when unknown.
    #[prost(int64, tag = "5")]
    pub start_line: i64,
}
