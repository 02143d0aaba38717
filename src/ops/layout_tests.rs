use super::super::common::test_util::*;
use super::*;
