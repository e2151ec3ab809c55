//! Compile options, sent to the plugin as a serialized `xla.CompileOptionsProto`.
//!
//! Only the fields tpuc sets are declared, with the field numbers of XLA's
//! `xla/pjrt/proto/compile_options.proto` and `xla/xla_data.proto`; protobuf readers skip
//! nothing we send and we send nothing else, so the subset is wire-compatible.

use std::collections::BTreeMap;

use prost::Message;

use crate::error::{Error, Result};

/// Options for one compilation. `CompileOptions::default()` is a single-device build.
#[derive(Clone, Debug, PartialEq)]
pub struct CompileOptions {
    /// Replicas of the program (data parallel copies). Default 1.
    pub num_replicas: i64,
    /// Partitions of the program (model parallel shards). Default 1.
    pub num_partitions: i64,
    /// Partition with the SPMD partitioner (uses `mhlo.sharding` annotations). Default off.
    pub use_spmd_partitioning: bool,
    /// Use the Shardy partitioner instead of the GSPMD one. Default off.
    pub use_shardy_partitioner: bool,
    /// Fixed device ids, indexed `[partition][replica]`; `None` lets the plugin choose.
    pub device_assignment: Option<Vec<Vec<i64>>>,
    /// Build an executable that can run on any device of the platform.
    pub compile_portable_executable: bool,
    /// XLA flag overrides (`xla_...` debug options) by name.
    pub env_option_overrides: BTreeMap<String, OptionOverride>,
}

/// The value of an XLA flag override.
#[derive(Clone, Debug, PartialEq)]
pub enum OptionOverride {
    Str(String),
    Bool(bool),
    Int(i64),
    Double(f64),
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions {
            num_replicas: 1,
            num_partitions: 1,
            use_spmd_partitioning: false,
            use_shardy_partitioner: false,
            device_assignment: None,
            compile_portable_executable: false,
            env_option_overrides: BTreeMap::new(),
        }
    }
}

impl CompileOptions {
    /// SPMD over `num_partitions` devices (one replica).
    pub fn spmd(num_partitions: i64) -> Self {
        CompileOptions {
            num_partitions,
            use_spmd_partitioning: true,
            ..Self::default()
        }
    }

    /// The serialized `xla.CompileOptionsProto`.
    pub fn to_proto_bytes(&self) -> Vec<u8> {
        self.to_proto().encode_to_vec()
    }

    /// Reads a serialized `xla.CompileOptionsProto` (the fields tpuc knows; others ignored).
    pub fn from_proto_bytes(bytes: &[u8]) -> Result<Self> {
        let proto = proto::CompileOptionsProto::decode(bytes)
            .map_err(|e| Error::InvalidArgument(format!("not a CompileOptionsProto: {e}")))?;
        let build = proto.executable_build_options.unwrap_or_default();
        Ok(CompileOptions {
            num_replicas: build.num_replicas,
            num_partitions: build.num_partitions,
            use_spmd_partitioning: build.use_spmd_partitioning,
            use_shardy_partitioner: build.use_shardy_partitioner,
            device_assignment: build.device_assignment.map(|da| {
                da.computation_devices
                    .into_iter()
                    .map(|c| c.replica_device_ids)
                    .collect()
            }),
            compile_portable_executable: proto.compile_portable_executable,
            env_option_overrides: proto
                .env_option_overrides
                .into_iter()
                .filter_map(|(k, v)| {
                    let v = match v.value? {
                        proto::option_override::Value::StringField(s) => OptionOverride::Str(s),
                        proto::option_override::Value::BoolField(b) => OptionOverride::Bool(b),
                        proto::option_override::Value::IntField(i) => OptionOverride::Int(i),
                        proto::option_override::Value::DoubleField(d) => OptionOverride::Double(d),
                    };
                    Some((k, v))
                })
                .collect(),
        })
    }

    fn to_proto(&self) -> proto::CompileOptionsProto {
        let device_assignment =
            self.device_assignment
                .as_ref()
                .map(|parts| proto::DeviceAssignmentProto {
                    replica_count: parts.first().map_or(0, |p| p.len() as i32),
                    computation_count: parts.len() as i32,
                    computation_devices: parts
                        .iter()
                        .map(|ids| proto::ComputationDevice {
                            replica_device_ids: ids.clone(),
                        })
                        .collect(),
                });
        proto::CompileOptionsProto {
            executable_build_options: Some(proto::ExecutableBuildOptionsProto {
                // -1 = "not set", as in XLA's ExecutableBuildOptions (proto3's 0 would pin
                // device 0).
                device_ordinal: -1,
                num_replicas: self.num_replicas,
                num_partitions: self.num_partitions,
                use_spmd_partitioning: self.use_spmd_partitioning,
                use_shardy_partitioner: self.use_shardy_partitioner,
                device_assignment,
            }),
            compile_portable_executable: self.compile_portable_executable,
            env_option_overrides: self
                .env_option_overrides
                .iter()
                .map(|(k, v)| {
                    let value = match v {
                        OptionOverride::Str(s) => {
                            proto::option_override::Value::StringField(s.clone())
                        }
                        OptionOverride::Bool(b) => proto::option_override::Value::BoolField(*b),
                        OptionOverride::Int(i) => proto::option_override::Value::IntField(*i),
                        OptionOverride::Double(d) => proto::option_override::Value::DoubleField(*d),
                    };
                    (k.clone(), proto::OptionOverrideProto { value: Some(value) })
                })
                .collect(),
        }
    }
}

/// The messages, declared by hand (field numbers from XLA's protos).
mod proto {
    use std::collections::BTreeMap;

    /// `xla.CompileOptionsProto`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct CompileOptionsProto {
        #[prost(message, optional, tag = "3")]
        pub executable_build_options: Option<ExecutableBuildOptionsProto>,
        #[prost(bool, tag = "4")]
        pub compile_portable_executable: bool,
        #[prost(btree_map = "string, message", tag = "7")]
        pub env_option_overrides: BTreeMap<String, OptionOverrideProto>,
    }

    /// `xla.ExecutableBuildOptionsProto`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ExecutableBuildOptionsProto {
        #[prost(int64, tag = "1")]
        pub device_ordinal: i64,
        #[prost(int64, tag = "4")]
        pub num_replicas: i64,
        #[prost(int64, tag = "5")]
        pub num_partitions: i64,
        #[prost(bool, tag = "6")]
        pub use_spmd_partitioning: bool,
        #[prost(message, optional, tag = "9")]
        pub device_assignment: Option<DeviceAssignmentProto>,
        #[prost(bool, tag = "19")]
        pub use_shardy_partitioner: bool,
    }

    /// `xla.DeviceAssignmentProto`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct DeviceAssignmentProto {
        #[prost(int32, tag = "1")]
        pub replica_count: i32,
        #[prost(int32, tag = "2")]
        pub computation_count: i32,
        #[prost(message, repeated, tag = "3")]
        pub computation_devices: Vec<ComputationDevice>,
    }

    /// `xla.DeviceAssignmentProto.ComputationDevice`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ComputationDevice {
        #[prost(int64, repeated, tag = "1")]
        pub replica_device_ids: Vec<i64>,
    }

    /// `xla.OptionOverrideProto`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct OptionOverrideProto {
        #[prost(oneof = "option_override::Value", tags = "1, 2, 3, 4")]
        pub value: Option<option_override::Value>,
    }

    pub mod option_override {
        /// Variant names follow the proto's field names.
        #[allow(clippy::enum_variant_names)]
        #[derive(Clone, PartialEq, prost::Oneof)]
        pub enum Value {
            #[prost(string, tag = "1")]
            StringField(String),
            #[prost(bool, tag = "2")]
            BoolField(bool),
            #[prost(int64, tag = "3")]
            IntField(i64),
            #[prost(double, tag = "4")]
            DoubleField(f64),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_options_round_trip() {
        let o = CompileOptions::default();
        assert_eq!(
            CompileOptions::from_proto_bytes(&o.to_proto_bytes()).unwrap(),
            o
        );
    }

    #[test]
    fn spmd_options_round_trip_with_everything_set() {
        let mut o = CompileOptions::spmd(4);
        o.use_shardy_partitioner = true;
        o.compile_portable_executable = true;
        o.device_assignment = Some(vec![vec![0], vec![1], vec![2], vec![3]]);
        o.env_option_overrides
            .insert("xla_dump_to".into(), OptionOverride::Str("/tmp/x".into()));
        o.env_option_overrides
            .insert("xla_flag_b".into(), OptionOverride::Bool(true));
        o.env_option_overrides
            .insert("xla_flag_i".into(), OptionOverride::Int(-7));
        o.env_option_overrides
            .insert("xla_flag_d".into(), OptionOverride::Double(0.5));
        assert_eq!(
            CompileOptions::from_proto_bytes(&o.to_proto_bytes()).unwrap(),
            o
        );
    }

    /// The exact bytes of a small message, worked out by hand from the protobuf wire format,
    /// so that a wrong field number cannot round-trip unnoticed.
    #[test]
    fn spmd_wire_bytes() {
        let bytes = CompileOptions::spmd(4).to_proto_bytes();
        let build = [
            0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
            0x01, // 1: device_ordinal -1
            0x20, 0x01, // 4: num_replicas 1
            0x28, 0x04, // 5: num_partitions 4
            0x30, 0x01, // 6: use_spmd_partitioning true
        ];
        let mut expected = vec![0x1a, build.len() as u8]; // 3: executable_build_options
        expected.extend_from_slice(&build);
        assert_eq!(bytes, expected);
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(CompileOptions::from_proto_bytes(&[0xff, 0xff]).is_err());
    }
}
