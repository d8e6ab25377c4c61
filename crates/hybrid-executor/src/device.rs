use std::fmt;

/// The device that ran a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Device {
    Cpu,
    Gpu { ordinal: usize },
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Gpu { ordinal } => write!(f, "gpu:{ordinal}"),
        }
    }
}

/// Which devices a call may use. `RECALL_DEVICE=cpu|gpu|auto` sets it for the whole process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DevicePolicy {
    /// The GPU when one is usable and the call is large enough to gain from it; the CPU otherwise.
    #[default]
    Auto,
    /// Always the CPU; no driver is even looked for.
    Cpu,
    /// The GPU; a missing GPU is an error instead of a fallback. (A GPU failure during a call still
    /// falls back to the CPU, so the call is answered.)
    Gpu,
}

impl DevicePolicy {
    /// Parse `cpu`, `gpu` or `auto` (any case).
    pub fn parse(s: &str) -> Option<DevicePolicy> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" | "" => Some(DevicePolicy::Auto),
            "cpu" => Some(DevicePolicy::Cpu),
            "gpu" | "cuda" => Some(DevicePolicy::Gpu),
            _ => None,
        }
    }

    /// The policy from `RECALL_DEVICE`, `Auto` when unset; an unknown value is an error message.
    pub fn from_env() -> Result<DevicePolicy, String> {
        match std::env::var("RECALL_DEVICE") {
            Err(_) => Ok(DevicePolicy::Auto),
            Ok(v) => DevicePolicy::parse(&v)
                .ok_or_else(|| format!("RECALL_DEVICE={v:?} is not one of cpu, gpu, auto")),
        }
    }
}

impl fmt::Display for DevicePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DevicePolicy::Auto => "auto",
            DevicePolicy::Cpu => "cpu",
            DevicePolicy::Gpu => "gpu",
        })
    }
}

/// What the executor knows about the GPU it uses (no driver types, so it exists in CPU-only builds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuDescription {
    pub ordinal: usize,
    pub name: String,
    pub sm: String,
    pub sm_count: u32,
    pub total_memory: usize,
    pub free_memory: usize,
    pub l2_cache_bytes: usize,
    pub managed_memory_usable: bool,
    pub driver: String,
    /// The bundle image loaded, e.g. "sm_90 cubin".
    pub image: String,
}

/// Whether the executor has a GPU, and if not, why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuStatus {
    Ready(GpuDescription),
    /// The reason in words: no driver, driver too old, no device, compiled out, forced CPU, load error.
    Unavailable(String),
}
