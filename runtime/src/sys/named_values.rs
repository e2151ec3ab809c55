//! `PJRT_NamedValue` lists: reading the plugin's into owned `NamedValue`s, and lending ours
//! to the create calls (`NamedValuesIn`).

use std::ptr;

use super::args::{copy_slice, copy_string, zeroed};
use crate::ffi;
use crate::types::{NamedValue, Value};

/// Reads a plugin-owned `PJRT_NamedValue` array into owned values.
///
/// # Safety
/// `values` must be null or point to `len` valid named values whose data is readable.
pub(super) unsafe fn read_named_values(values: *const ffi::PJRT_NamedValue, len: usize) -> Vec<NamedValue> {
    let mut out = Vec::with_capacity(len);
    if values.is_null() {
        return out;
    }
    for i in 0..len {
        let v = &*values.add(i);
        let name = copy_string(v.name, v.name_size);
        let value = match v.type_ {
            ffi::PJRT_NamedValue_kString => {
                Value::Str(copy_string(v.value.string_value, v.value_size))
            }
            ffi::PJRT_NamedValue_kInt64 => Value::Int(v.value.int64_value),
            ffi::PJRT_NamedValue_kInt64List => {
                Value::Ints(copy_slice(v.value.int64_array_value, v.value_size))
            }
            ffi::PJRT_NamedValue_kFloat => Value::Float(v.value.float_value),
            ffi::PJRT_NamedValue_kBool => Value::Bool(v.value.bool_value),
            other => Value::Str(format!("<unknown PJRT_NamedValue type {other}>")),
        };
        out.push(NamedValue { name, value });
    }
    out
}

/// `PJRT_NamedValue`s pointing into borrowed `NamedValue`s, for create calls.
pub(super) struct NamedValuesIn<'a> {
    raw: Vec<ffi::PJRT_NamedValue>,
    _borrow: std::marker::PhantomData<&'a [NamedValue]>,
}

impl<'a> NamedValuesIn<'a> {
    pub(super) fn new(values: &'a [NamedValue]) -> Self {
        let raw = values
            .iter()
            .map(|nv| {
                let mut v = zeroed::<ffi::PJRT_NamedValue>();
                v.name = nv.name.as_ptr().cast();
                v.name_size = nv.name.len();
                match &nv.value {
                    Value::Str(s) => {
                        v.type_ = ffi::PJRT_NamedValue_kString;
                        v.value.string_value = s.as_ptr().cast();
                        v.value_size = s.len();
                    }
                    Value::Int(i) => {
                        v.type_ = ffi::PJRT_NamedValue_kInt64;
                        v.value.int64_value = *i;
                        v.value_size = 1;
                    }
                    Value::Ints(list) => {
                        v.type_ = ffi::PJRT_NamedValue_kInt64List;
                        v.value.int64_array_value = list.as_ptr();
                        v.value_size = list.len();
                    }
                    Value::Float(f) => {
                        v.type_ = ffi::PJRT_NamedValue_kFloat;
                        v.value.float_value = *f;
                        v.value_size = 1;
                    }
                    Value::Bool(b) => {
                        v.type_ = ffi::PJRT_NamedValue_kBool;
                        v.value.bool_value = *b;
                        v.value_size = 1;
                    }
                }
                v
            })
            .collect();
        NamedValuesIn {
            raw,
            _borrow: std::marker::PhantomData,
        }
    }
    pub(super) fn as_ptr(&self) -> *const ffi::PJRT_NamedValue {
        if self.raw.is_empty() {
            ptr::null()
        } else {
            self.raw.as_ptr()
        }
    }
    pub(super) fn len(&self) -> usize {
        self.raw.len()
    }
}
