//! Helpers shared by the end-to-end suites: Kubernetes manifest checks and the external
//! tools (helm, kubernetes-validate, promtool) the chart tests drive, and raw HTTP reading.

pub mod chart;
pub mod examples;
pub mod http;
pub mod k8s_checks;
pub mod tools;
