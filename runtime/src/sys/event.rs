//! `RawEvent`: an owned `PJRT_Event`, awaited and destroyed by its single owner.

use std::ptr::NonNull;

use super::api::Api;
use super::args::Padded;
use super::live::Live;
use crate::error::Result;
use crate::ffi;

pub(super) struct RawEvent {
    api: &'static Api,
    ptr: NonNull<ffi::PJRT_Event>,
    _live: Live,
}

impl RawEvent {
    pub(super) fn new(api: &'static Api, ptr: *mut ffi::PJRT_Event) -> Option<RawEvent> {
        NonNull::new(ptr).map(|ptr| RawEvent {
            api,
            ptr,
            _live: Live::new(),
        })
    }

    /// Blocks until the event is ready; its error, if any.
    pub(super) fn wait(self) -> Result<()> {
        let mut a = Padded::<ffi::PJRT_Event_Await_Args>::new();
        a.event = self.ptr.as_ptr();
        call!(self.api, PJRT_Event_Await, a.ptr())
        // `self` drops here: the event is destroyed after the await.
    }
}

destroy_on_drop!(RawEvent, PJRT_Event_Destroy_Args.event, PJRT_Event_Destroy);
