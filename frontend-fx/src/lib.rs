//! tpuc-frontend-fx
