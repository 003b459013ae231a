pub(crate) mod policy;
