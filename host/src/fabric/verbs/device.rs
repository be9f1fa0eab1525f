//! A small safe layer over `ibverbs-sys`: the device, its port, one
//! protection domain, memory regions, completion queues and RC queue pairs.
//!
//! As in rust-ibverbs and sideway, parents are kept alive by `Arc`s held by
//! their children (a QP holds its PD and CQs, a PD its context), so no
//! handle can outlive what it was created from. Every failing verb has its
//! own [`VerbsError`] variant with the errno; an `EINVAL` from a queue-pair
//! transition carries a diagnosis of the usual causes.
//!
//! Posting is the one `unsafe` operation of the public surface
//! ([`Qp::post_send`]): the device reads and writes the memory a work
//! request names until its completion is reaped, which the type system
//! cannot see.

use ibverbs_sys as ffi;
use std::ffi::CStr;
use std::io;
use std::sync::Arc;

/// Why a verb failed.
#[derive(Debug, thiserror::Error)]
pub enum VerbsError {
    /// No RDMA device at all (no kernel support, no rdma-core, no rxe link).
    #[error("no RDMA device (is rdma-core installed and an rxe/mlx device configured?): {detail}")]
    NoDevice {
        /// What the device list said.
        detail: String,
    },
    /// Devices exist, but not the configured one.
    #[error("RDMA device `{name}` not found; devices here: {available}")]
    DeviceNotFound {
        /// The configured name.
        name: String,
        /// The names that exist.
        available: String,
    },
    /// `ibv_open_device`.
    #[error("ibv_open_device({device}): {source}")]
    OpenDevice {
        /// Device name.
        device: String,
        /// errno.
        #[source]
        source: io::Error,
    },
    /// `ibv_query_device`.
    #[error("ibv_query_device({device}): {source}")]
    QueryDevice {
        /// Device name.
        device: String,
        /// errno.
        #[source]
        source: io::Error,
    },
    /// The configured port does not exist.
    #[error("port {port} of {device} does not exist: the device has ports 1 to {count} (members.verbs.port)")]
    NoSuchPort {
        /// Device name.
        device: String,
        /// Configured port.
        port: u8,
        /// Ports of the device.
        count: u8,
    },
    /// `ibv_query_port`.
    #[error("ibv_query_port({device}, port {port}): {source}")]
    QueryPort {
        /// Device name.
        device: String,
        /// Port.
        port: u8,
        /// errno.
        #[source]
        source: io::Error,
    },
    /// The port is not active (cable, link, or the rxe netdev is down).
    #[error("port {port} of {device} is {state}, not ACTIVE (for rxe: is its netdev up?)")]
    PortNotActive {
        /// Device name.
        device: String,
        /// Port.
        port: u8,
        /// Its state.
        state: &'static str,
    },
    /// `ibv_query_gid`.
    #[error("ibv_query_gid({device}, port {port}, index {index}): {source}")]
    QueryGid {
        /// Device name.
        device: String,
        /// Port.
        port: u8,
        /// GID index.
        index: u8,
        /// errno.
        #[source]
        source: io::Error,
    },
    /// RoCE needs a GID and this index has none.
    #[error("GID index {index} of {device} port {port} is empty; RoCE needs a GID: pick a non-zero entry of /sys/class/infiniband/{device}/ports/{port}/gids/ (members.verbs.gid_index)")]
    EmptyGid {
        /// Device name.
        device: String,
        /// Port.
        port: u8,
        /// GID index.
        index: u8,
    },
    /// `ibv_alloc_pd`.
    #[error("ibv_alloc_pd: {0}")]
    AllocPd(#[source] io::Error),
    /// `ibv_reg_mr`.
    #[error("ibv_reg_mr({what}, {bytes} bytes): {source}")]
    RegMr {
        /// What was registered.
        what: String,
        /// Its size.
        bytes: u64,
        /// errno.
        #[source]
        source: io::Error,
    },
    /// `ibv_reg_mr` failed because of RLIMIT_MEMLOCK.
    #[error("ibv_reg_mr({what}, {bytes} bytes) failed ({source}): the locked-memory limit is {limit}; registered memory is pinned and counts against it: raise it (`ulimit -l unlimited`, systemd LimitMEMLOCK=infinity, or /etc/security/limits.conf)")]
    Memlock {
        /// What was registered.
        what: String,
        /// Its size.
        bytes: u64,
        /// RLIMIT_MEMLOCK, readable.
        limit: String,
        /// errno.
        #[source]
        source: io::Error,
    },
    /// `ibv_dereg_mr`.
    #[error("ibv_dereg_mr: {0}")]
    DeregMr(#[source] io::Error),
    /// `ibv_create_cq`.
    #[error("ibv_create_cq({entries} entries): {source}")]
    CreateCq {
        /// Requested entries.
        entries: i32,
        /// errno.
        #[source]
        source: io::Error,
    },
    /// `ibv_create_qp`.
    #[error("ibv_create_qp(RC, {send_wr} send WRs): {source}")]
    CreateQp {
        /// Requested send queue depth.
        send_wr: u32,
        /// errno.
        #[source]
        source: io::Error,
    },
    /// The device cannot carry inline writes of the size the core uses.
    #[error("the device allows {found} bytes of inline data per work request; inline writes need {needed}")]
    InlineTooSmall {
        /// What the QP got.
        found: u32,
        /// What we need.
        needed: u32,
    },
    /// `ibv_modify_qp`.
    #[error("ibv_modify_qp(qp {qpn} to {to}): {source}{diagnosis}")]
    ModifyQp {
        /// QP number.
        qpn: u32,
        /// Target state (or "access flags").
        to: &'static str,
        /// errno.
        #[source]
        source: io::Error,
        /// Why it usually happens (for EINVAL).
        diagnosis: String,
    },
    /// `ibv_post_send`.
    #[error("ibv_post_send(qp {qpn}): {source}")]
    PostSend {
        /// QP number.
        qpn: u32,
        /// errno.
        #[source]
        source: io::Error,
    },
    /// `ibv_poll_cq` returned an error.
    #[error("ibv_poll_cq: error {0}")]
    PollCq(i32),
    /// A QP could not be replaced: requests posted on it did not complete
    /// within the bound.
    #[error("{0}")]
    Busy(&'static str),
}

/// errno of a verb that returns 0 or an errno (some providers return -1
/// and set errno instead).
fn errno_of(ret: i32) -> io::Error {
    if ret > 0 {
        io::Error::from_raw_os_error(ret)
    } else {
        io::Error::last_os_error()
    }
}

/// An open device.
pub struct Context {
    ctx: *mut ffi::ibv_context,
    name: String,
    attr: ffi::ibv_device_attr,
}

// SAFETY: libibverbs contexts may be used from any thread (the library
// serialises what needs it); we never hand out the raw pointer mutably
// outside this module.
unsafe impl Send for Context {}
// SAFETY: as above.
unsafe impl Sync for Context {}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: `ctx` came from ibv_open_device and every child (which
        // holds an Arc of us) is gone.
        unsafe { ffi::ibv_close_device(self.ctx) };
    }
}

/// Names of the RDMA devices of this host.
pub fn device_names() -> Result<Vec<String>, VerbsError> {
    let mut n: i32 = 0;
    // SAFETY: `n` is a valid out-pointer; the list is freed below.
    let list = unsafe { ffi::ibv_get_device_list(&mut n) };
    if list.is_null() {
        let e = io::Error::last_os_error();
        let detail = if e.raw_os_error() == Some(libc::ENOSYS) {
            "the kernel has no RDMA support (ENOSYS from ibv_get_device_list)".to_string()
        } else {
            format!("ibv_get_device_list: {e}")
        };
        return Err(VerbsError::NoDevice { detail });
    }
    let mut names = Vec::new();
    for i in 0..n.max(0) as usize {
        // SAFETY: the list holds `n` valid device pointers.
        let dev = unsafe { *list.add(i) };
        // SAFETY: a device from the list has a NUL-terminated name.
        let name = unsafe { CStr::from_ptr(ffi::ibv_get_device_name(dev)) };
        names.push(name.to_string_lossy().into_owned());
    }
    // SAFETY: `list` came from ibv_get_device_list and is freed once.
    unsafe { ffi::ibv_free_device_list(list) };
    Ok(names)
}

impl Context {
    /// Opens the device called `name`.
    pub fn open(name: &str) -> Result<Arc<Context>, VerbsError> {
        let mut n: i32 = 0;
        let names = device_names()?;
        if names.is_empty() {
            return Err(VerbsError::NoDevice {
                detail: "the device list is empty (for Soft-RoCE: `modprobe rdma_rxe; rdma link add rxe0 type rxe netdev eth0`)".into(),
            });
        }
        if !names.iter().any(|d| d == name) {
            return Err(VerbsError::DeviceNotFound {
                name: name.to_string(),
                available: names.join(", "),
            });
        }
        // SAFETY: as in `device_names`.
        let list = unsafe { ffi::ibv_get_device_list(&mut n) };
        if list.is_null() {
            return Err(VerbsError::NoDevice {
                detail: format!("ibv_get_device_list: {}", io::Error::last_os_error()),
            });
        }
        let mut ctx = std::ptr::null_mut();
        let mut open_err = None;
        for i in 0..n.max(0) as usize {
            // SAFETY: the list holds `n` valid device pointers.
            let dev = unsafe { *list.add(i) };
            // SAFETY: a listed device has a NUL-terminated name.
            let dname = unsafe { CStr::from_ptr(ffi::ibv_get_device_name(dev)) };
            if dname.to_bytes() == name.as_bytes() {
                // SAFETY: `dev` is valid until the list is freed; the
                // context stays valid after that.
                ctx = unsafe { ffi::ibv_open_device(dev) };
                if ctx.is_null() {
                    open_err = Some(io::Error::last_os_error());
                }
                break;
            }
        }
        // SAFETY: freed once; the opened context does not depend on it.
        unsafe { ffi::ibv_free_device_list(list) };
        if ctx.is_null() {
            return Err(VerbsError::OpenDevice {
                device: name.to_string(),
                source: open_err.unwrap_or_else(|| io::Error::from_raw_os_error(libc::ENODEV)),
            });
        }
        let mut attr = ffi::ibv_device_attr::default();
        // SAFETY: `ctx` is open; `attr` is a valid out-pointer.
        let r = unsafe { ffi::ibv_query_device(ctx, &mut attr) };
        if r != 0 {
            let source = errno_of(r);
            // SAFETY: opened above, closed once.
            unsafe { ffi::ibv_close_device(ctx) };
            return Err(VerbsError::QueryDevice {
                device: name.to_string(),
                source,
            });
        }
        Ok(Arc::new(Context {
            ctx,
            name: name.to_string(),
            attr,
        }))
    }

    /// The device name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Largest number of outstanding RDMA READ/atomic requests per QP.
    pub fn max_qp_rd_atom(&self) -> u8 {
        self.attr.max_qp_rd_atom.clamp(1, 255) as u8
    }

    /// Largest number of incoming RDMA READ/atomic requests per QP.
    pub fn max_qp_init_rd_atom(&self) -> u8 {
        self.attr.max_qp_init_rd_atom.clamp(1, 255) as u8
    }

    /// Largest work-queue depth.
    pub fn max_qp_wr(&self) -> u32 {
        self.attr.max_qp_wr.max(1) as u32
    }

    /// Largest completion queue.
    pub fn max_cqe(&self) -> i32 {
        self.attr.max_cqe.max(1)
    }

    /// Queries port `port`; checks that it exists and is active.
    pub fn port(&self, port: u8) -> Result<PortInfo, VerbsError> {
        let count = self.attr.phys_port_cnt;
        if port == 0 || port > count {
            return Err(VerbsError::NoSuchPort {
                device: self.name.clone(),
                port,
                count,
            });
        }
        let mut attr = ffi::ibv_port_attr::default();
        // SAFETY: the exported ibv_query_port takes the older, shorter
        // port-attribute layout, of which `ibv_port_attr` is an extension;
        // providers fill the full structure (as rust-ibverbs relies on).
        let r = unsafe {
            ffi::ibv_query_port(
                self.ctx,
                port,
                &mut attr as *mut ffi::ibv_port_attr as *mut ffi::_compat_ibv_port_attr,
            )
        };
        if r != 0 {
            return Err(VerbsError::QueryPort {
                device: self.name.clone(),
                port,
                source: errno_of(r),
            });
        }
        if attr.state != ffi::ibv_port_state::IBV_PORT_ACTIVE {
            let state = match attr.state {
                ffi::ibv_port_state::IBV_PORT_DOWN => "DOWN",
                ffi::ibv_port_state::IBV_PORT_INIT => "INIT",
                ffi::ibv_port_state::IBV_PORT_ARMED => "ARMED",
                _ => "not active",
            };
            return Err(VerbsError::PortNotActive {
                device: self.name.clone(),
                port,
                state,
            });
        }
        Ok(PortInfo {
            port,
            lid: attr.lid,
            active_mtu: attr.active_mtu,
            ethernet: u32::from(attr.link_layer) == ffi::IBV_LINK_LAYER_ETHERNET,
        })
    }

    /// GID `index` of `port`.
    pub fn gid(&self, port: u8, index: u8) -> Result<[u8; 16], VerbsError> {
        let mut gid = ffi::ibv_gid::default();
        // SAFETY: `ctx` is open; `gid` is a valid out-pointer.
        let r = unsafe { ffi::ibv_query_gid(self.ctx, port, i32::from(index), &mut gid) };
        if r != 0 {
            return Err(VerbsError::QueryGid {
                device: self.name.clone(),
                port,
                index,
                source: errno_of(r),
            });
        }
        // SAFETY: every bit pattern of the union is a valid byte array.
        Ok(unsafe { gid.raw })
    }
}

/// What a port is.
#[derive(Clone, Copy, Debug)]
pub struct PortInfo {
    /// Port number.
    pub port: u8,
    /// InfiniBand LID (0 on RoCE).
    pub lid: u16,
    /// Active MTU (an `ibv_mtu`).
    pub active_mtu: u32,
    /// RoCE (needs GIDs) rather than InfiniBand (LIDs).
    pub ethernet: bool,
}

/// A protection domain.
pub struct Pd {
    pd: *mut ffi::ibv_pd,
    ctx: Arc<Context>,
}

// SAFETY: as for Context.
unsafe impl Send for Pd {}
// SAFETY: as for Context.
unsafe impl Sync for Pd {}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: allocated by ibv_alloc_pd; its MRs and QPs (which hold an
        // Arc of us) are gone.
        unsafe { ffi::ibv_dealloc_pd(self.pd) };
    }
}

impl Pd {
    /// Allocates the protection domain.
    pub fn new(ctx: &Arc<Context>) -> Result<Arc<Pd>, VerbsError> {
        // SAFETY: `ctx` is open.
        let pd = unsafe { ffi::ibv_alloc_pd(ctx.ctx) };
        if pd.is_null() {
            return Err(VerbsError::AllocPd(io::Error::last_os_error()));
        }
        Ok(Arc::new(Pd {
            pd,
            ctx: ctx.clone(),
        }))
    }
}

/// Access rights of a memory region or a queue pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AccessFlags(pub u32);

impl AccessFlags {
    /// Local use only (the device may write it for READ results).
    pub const LOCAL: AccessFlags = AccessFlags(ffi::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0);
    /// Local plus remote read, write and atomics.
    pub const REMOTE_ALL: AccessFlags = AccessFlags(
        ffi::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0
            | ffi::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0
            | ffi::ibv_access_flags::IBV_ACCESS_REMOTE_READ.0
            | ffi::ibv_access_flags::IBV_ACCESS_REMOTE_ATOMIC.0,
    );
    /// Queue pair: incoming READ, WRITE and atomics allowed.
    pub const QP_REMOTE_ALL: AccessFlags = AccessFlags(
        ffi::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0
            | ffi::ibv_access_flags::IBV_ACCESS_REMOTE_READ.0
            | ffi::ibv_access_flags::IBV_ACCESS_REMOTE_ATOMIC.0,
    );
    /// Queue pair: no incoming operation allowed.
    pub const QP_NONE: AccessFlags = AccessFlags(0);
}

/// A registered memory region.
pub struct Mr {
    mr: *mut ffi::ibv_mr,
    _pd: Arc<Pd>,
}

// SAFETY: an MR handle is plain data for the device; dereg happens once
// in Drop.
unsafe impl Send for Mr {}
// SAFETY: as above.
unsafe impl Sync for Mr {}

impl Drop for Mr {
    fn drop(&mut self) {
        if self.mr.is_null() {
            return; // deregistered by `deregister`
        }
        // SAFETY: registered by ibv_reg_mr, deregistered once.
        let r = unsafe { ffi::ibv_dereg_mr(self.mr) };
        if r != 0 {
            tracing::error!(error = %VerbsError::DeregMr(errno_of(r)), "deregistering a memory region");
        }
    }
}

fn memlock_limit() -> String {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit with a valid out-pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut rl) } != 0 {
        return "unknown".into();
    }
    if rl.rlim_cur == libc::RLIM_INFINITY {
        "unlimited".into()
    } else {
        format!("{} KiB", rl.rlim_cur / 1024)
    }
}

impl Mr {
    /// Registers `[addr, addr+len)`.
    ///
    /// # Safety
    /// The memory must stay mapped for as long as the returned region (and
    /// any work request using it) lives; the device reads and writes it
    /// behind the compiler's back, so the caller accesses it only through
    /// atomics or volatile copies.
    pub unsafe fn register(
        pd: &Arc<Pd>,
        addr: *mut u8,
        len: u64,
        access: AccessFlags,
        what: &str,
    ) -> Result<Mr, VerbsError> {
        // SAFETY: the caller guarantees the range is mapped; the PD is live.
        let mr = unsafe { ffi::ibv_reg_mr(pd.pd, addr.cast(), len as usize, access.0 as i32) };
        if mr.is_null() {
            let source = io::Error::last_os_error();
            let limit = memlock_limit();
            return Err(match source.raw_os_error() {
                Some(libc::ENOMEM) | Some(libc::EPERM) | Some(libc::EAGAIN)
                    if limit != "unlimited" =>
                {
                    VerbsError::Memlock {
                        what: what.to_string(),
                        bytes: len,
                        limit,
                        source,
                    }
                }
                _ => VerbsError::RegMr {
                    what: what.to_string(),
                    bytes: len,
                    source,
                },
            });
        }
        Ok(Mr {
            mr,
            _pd: pd.clone(),
        })
    }

    /// Deregisters the region, reporting failure. Once this returns `Ok`
    /// the device no longer accesses the memory through this region's
    /// keys: rxe removes the key from its pool and waits for the requests
    /// that hold a reference to the region; a hardware device destroys
    /// the key in firmware before the command returns. This is what makes
    /// a revoke complete (DARE §3.2.1).
    /// On failure the registration is still valid (its keys still work)
    /// and is handed back, so that the caller can retry rather than lose
    /// track of it.
    pub fn deregister(mut self) -> Result<(), (Mr, VerbsError)> {
        let mr = std::mem::replace(&mut self.mr, std::ptr::null_mut());
        // SAFETY: registered by ibv_reg_mr; `self.mr` is now null, so Drop
        // will not deregister it again.
        let r = unsafe { ffi::ibv_dereg_mr(mr) };
        if r != 0 {
            self.mr = mr;
            return Err((self, VerbsError::DeregMr(errno_of(r))));
        }
        Ok(())
    }

    /// Local key.
    pub fn lkey(&self) -> u32 {
        // SAFETY: `mr` is a live registration.
        unsafe { (*self.mr).lkey }
    }

    /// Remote key.
    pub fn rkey(&self) -> u32 {
        // SAFETY: `mr` is a live registration.
        unsafe { (*self.mr).rkey }
    }
}

/// A completion queue.
pub struct Cq {
    cq: *mut ffi::ibv_cq,
    _ctx: Arc<Context>,
}

// SAFETY: libibverbs CQs are thread-safe; each is polled by one thread here.
unsafe impl Send for Cq {}
// SAFETY: as above.
unsafe impl Sync for Cq {}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: created by ibv_create_cq; the QPs using it (which hold an
        // Arc of us) are gone.
        unsafe { ffi::ibv_destroy_cq(self.cq) };
    }
}

/// One reaped work completion, reduced to what the fabric needs.
#[derive(Clone, Copy, Debug)]
pub struct Wc {
    /// The `wr_id` it was posted with.
    pub wr_id: u64,
    /// The QP it belongs to.
    pub qp_num: u32,
    /// `IBV_WC_*` status (0 is success).
    pub status: u32,
    /// Vendor error syndrome.
    pub vendor_err: u32,
}

impl Cq {
    /// A completion queue of at least `entries` entries.
    pub fn new(ctx: &Arc<Context>, entries: i32) -> Result<Arc<Cq>, VerbsError> {
        let entries = entries.min(ctx.max_cqe());
        // SAFETY: `ctx` is open; no completion channel, vector 0.
        let cq = unsafe {
            ffi::ibv_create_cq(
                ctx.ctx,
                entries,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
        };
        if cq.is_null() {
            return Err(VerbsError::CreateCq {
                entries,
                source: io::Error::last_os_error(),
            });
        }
        Ok(Arc::new(Cq {
            cq,
            _ctx: ctx.clone(),
        }))
    }

    /// Reaps up to `out.len()` completions (at most 32 per call); returns
    /// how many were written.
    pub fn poll(&self, out: &mut [Wc]) -> Result<usize, VerbsError> {
        const BATCH: usize = 32;
        let mut wcs = [ffi::ibv_wc::default(); BATCH];
        let want = out.len().min(BATCH) as i32;
        // SAFETY: `cq` is live; `wcs` has room for `want` entries. poll_cq
        // is an inline in verbs.h dispatching through the context's ops.
        let n = unsafe {
            let ctx = (*self.cq).context;
            let poll = (*ctx)
                .ops
                .poll_cq
                .expect("every provider implements poll_cq");
            poll(self.cq, want, wcs.as_mut_ptr())
        };
        if n < 0 {
            return Err(VerbsError::PollCq(n));
        }
        for (i, wc) in wcs.iter().take(n as usize).enumerate() {
            let (status, vendor_err) = wc.error().unwrap_or((0, 0));
            out[i] = Wc {
                wr_id: wc.wr_id(),
                qp_num: wc.qp_num,
                status,
                vendor_err,
            };
        }
        Ok(n as usize)
    }
}

/// Where the other end of a queue pair is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpEndpoint {
    /// Its QP number.
    pub qpn: u32,
    /// The first PSN it sends with.
    pub psn: u32,
    /// Its port's LID (InfiniBand).
    pub lid: u16,
    /// Its GID (RoCE; also used on InfiniBand when non-zero).
    pub gid: [u8; 16],
}

/// Transport settings of a reliable connection.
#[derive(Clone, Copy, Debug)]
pub struct RcParams {
    /// Local port.
    pub port: u8,
    /// GID index used as source GID.
    pub gid_index: u8,
    /// RoCE (route by GID) or InfiniBand (route by LID).
    pub ethernet: bool,
    /// Path MTU (an `ibv_mtu`).
    pub mtu: u32,
    /// Local ACK timeout exponent: 4.096 µs × 2^timeout.
    pub timeout: u8,
    /// Transport retries before RETRY_EXC_ERR.
    pub retry_cnt: u8,
    /// RNR retries (7 = infinite; we post no receives, so no RNR happens).
    pub rnr_retry: u8,
    /// Outstanding READ/atomic as initiator.
    pub max_rd_atomic: u8,
    /// Outstanding READ/atomic as responder.
    pub max_dest_rd_atomic: u8,
}

/// An RC queue pair.
pub struct Qp {
    qp: *mut ffi::ibv_qp,
    _pd: Arc<Pd>,
    _send_cq: Arc<Cq>,
    _recv_cq: Arc<Cq>,
    max_inline: u32,
}

// SAFETY: libibverbs QPs are thread-safe; the fabric serialises posting and
// state changes of one QP through `&mut` or a mutex.
unsafe impl Send for Qp {}
// SAFETY: as above.
unsafe impl Sync for Qp {}

impl Drop for Qp {
    fn drop(&mut self) {
        // SAFETY: created by ibv_create_qp, destroyed once. Outstanding work
        // requests are abandoned by the device; the fabric only drops a QP
        // whose requests have all completed, or when the whole fabric goes.
        unsafe { ffi::ibv_destroy_qp(self.qp) };
    }
}

fn state_name(s: u32) -> &'static str {
    match s {
        ffi::ibv_qp_state::IBV_QPS_RESET => "RESET",
        ffi::ibv_qp_state::IBV_QPS_INIT => "INIT",
        ffi::ibv_qp_state::IBV_QPS_RTR => "RTR",
        ffi::ibv_qp_state::IBV_QPS_RTS => "RTS",
        ffi::ibv_qp_state::IBV_QPS_SQD => "SQD",
        ffi::ibv_qp_state::IBV_QPS_SQE => "SQE",
        ffi::ibv_qp_state::IBV_QPS_ERR => "ERROR",
        _ => "UNKNOWN",
    }
}

/// A one-sided operation, in device terms.
#[derive(Clone, Copy, Debug)]
pub enum SendOp {
    /// RDMA WRITE from `(local_addr, len, lkey)`.
    Write {
        /// Source address (registered).
        local_addr: u64,
        /// Bytes.
        len: u32,
        /// Source key.
        lkey: u32,
    },
    /// RDMA WRITE of bytes carried in the request (IBV_SEND_INLINE).
    WriteInline {
        /// The bytes (at most the QP's inline size).
        data: [u8; 16],
        /// How many are valid.
        len: u32,
    },
    /// RDMA READ into `(local_addr, len, lkey)`.
    Read {
        /// Destination (registered).
        local_addr: u64,
        /// Bytes.
        len: u32,
        /// Destination key.
        lkey: u32,
    },
    /// 8-byte compare-and-swap; the old value lands at `local_addr`.
    CompareSwap {
        /// Result address (registered, 8-aligned).
        local_addr: u64,
        /// Result key.
        lkey: u32,
        /// Compared with.
        expect: u64,
        /// Stored when equal.
        swap: u64,
    },
    /// 8-byte fetch-and-add; the old value lands at `local_addr`.
    FetchAdd {
        /// Result address (registered, 8-aligned).
        local_addr: u64,
        /// Result key.
        lkey: u32,
        /// Addend.
        add: u64,
    },
}

impl Qp {
    /// Creates an RC queue pair in RESET with a send queue of `send_wr`
    /// entries; every request is signalled.
    pub fn new(
        pd: &Arc<Pd>,
        send_cq: &Arc<Cq>,
        recv_cq: &Arc<Cq>,
        send_wr: u32,
        inline_bytes: u32,
    ) -> Result<Qp, VerbsError> {
        let send_wr = send_wr.min(pd.ctx.max_qp_wr());
        let mut init = ffi::ibv_qp_init_attr {
            qp_context: std::ptr::null_mut(),
            send_cq: send_cq.cq,
            recv_cq: recv_cq.cq,
            srq: std::ptr::null_mut(),
            cap: ffi::ibv_qp_cap {
                max_send_wr: send_wr,
                max_recv_wr: 1,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: inline_bytes,
            },
            qp_type: ffi::ibv_qp_type::IBV_QPT_RC,
            sq_sig_all: 1,
        };
        // SAFETY: the PD and CQs are live; `init` is a valid in/out struct.
        let qp = unsafe { ffi::ibv_create_qp(pd.pd, &mut init) };
        if qp.is_null() {
            return Err(VerbsError::CreateQp {
                send_wr,
                source: io::Error::last_os_error(),
            });
        }
        let q = Qp {
            qp,
            _pd: pd.clone(),
            _send_cq: send_cq.clone(),
            _recv_cq: recv_cq.clone(),
            max_inline: init.cap.max_inline_data,
        };
        if q.max_inline < inline_bytes {
            return Err(VerbsError::InlineTooSmall {
                found: q.max_inline,
                needed: inline_bytes,
            });
        }
        Ok(q)
    }

    /// The QP number.
    pub fn qpn(&self) -> u32 {
        // SAFETY: `qp` is live.
        unsafe { (*self.qp).qp_num }
    }

    /// Its current state, as the device reports it.
    pub fn state(&self) -> &'static str {
        let mut attr = ffi::ibv_qp_attr::default();
        let mut init = ffi::ibv_qp_init_attr::default();
        // SAFETY: `qp` is live; both out-pointers are valid.
        let r = unsafe {
            ffi::ibv_query_qp(
                self.qp,
                &mut attr,
                ffi::ibv_qp_attr_mask::IBV_QP_STATE.0 as i32,
                &mut init,
            )
        };
        if r != 0 {
            return "UNKNOWN (ibv_query_qp failed)";
        }
        state_name(attr.qp_state)
    }

    fn modify(
        &self,
        attr: &mut ffi::ibv_qp_attr,
        mask: ffi::ibv_qp_attr_mask,
        to: &'static str,
        hint: &str,
    ) -> Result<(), VerbsError> {
        // SAFETY: `qp` is live; `attr` is valid for the fields in `mask`.
        let r = unsafe { ffi::ibv_modify_qp(self.qp, attr, mask.0 as i32) };
        if r == 0 {
            return Ok(());
        }
        let source = errno_of(r);
        let diagnosis = if source.raw_os_error() == Some(libc::EINVAL) {
            format!(
                "; the device refused the transition: the QP is in {} ({hint})",
                self.state()
            )
        } else {
            String::new()
        };
        Err(VerbsError::ModifyQp {
            qpn: self.qpn(),
            to,
            source,
            diagnosis,
        })
    }

    /// RESET → INIT with the given incoming-access rights.
    pub fn to_init(&self, port: u8, access: AccessFlags) -> Result<(), VerbsError> {
        let mut attr = ffi::ibv_qp_attr {
            qp_state: ffi::ibv_qp_state::IBV_QPS_INIT,
            pkey_index: 0,
            port_num: port,
            qp_access_flags: access.0,
            ..Default::default()
        };
        use ffi::ibv_qp_attr_mask as M;
        self.modify(
            &mut attr,
            M::IBV_QP_STATE | M::IBV_QP_PKEY_INDEX | M::IBV_QP_PORT | M::IBV_QP_ACCESS_FLAGS,
            "INIT",
            "INIT needs a QP in RESET and a port that exists",
        )
    }

    /// INIT → RTR towards `remote`.
    pub fn to_rtr(&self, p: &RcParams, remote: &QpEndpoint) -> Result<(), VerbsError> {
        let global = p.ethernet || remote.gid != [0u8; 16];
        let mut attr = ffi::ibv_qp_attr {
            qp_state: ffi::ibv_qp_state::IBV_QPS_RTR,
            path_mtu: p.mtu,
            dest_qp_num: remote.qpn,
            rq_psn: remote.psn,
            max_dest_rd_atomic: p.max_dest_rd_atomic,
            min_rnr_timer: 12,
            ..Default::default()
        };
        attr.ah_attr.dlid = remote.lid;
        attr.ah_attr.sl = 0;
        attr.ah_attr.src_path_bits = 0;
        attr.ah_attr.port_num = p.port;
        attr.ah_attr.is_global = u8::from(global);
        if global {
            attr.ah_attr.grh.dgid.raw = remote.gid;
            attr.ah_attr.grh.sgid_index = p.gid_index;
            attr.ah_attr.grh.hop_limit = 64;
            attr.ah_attr.grh.traffic_class = 0;
            attr.ah_attr.grh.flow_label = 0;
        }
        use ffi::ibv_qp_attr_mask as M;
        self.modify(
            &mut attr,
            M::IBV_QP_STATE
                | M::IBV_QP_AV
                | M::IBV_QP_PATH_MTU
                | M::IBV_QP_DEST_QPN
                | M::IBV_QP_RQ_PSN
                | M::IBV_QP_MAX_DEST_RD_ATOMIC
                | M::IBV_QP_MIN_RNR_TIMER,
            "RTR",
            "RTR needs a QP in INIT, a path MTU the port supports, and an address the port can \
             route: on RoCE a valid gid_index and the peer's GID, on InfiniBand the peer's LID",
        )
    }

    /// RTR → RTS.
    pub fn to_rts(&self, p: &RcParams, psn: u32) -> Result<(), VerbsError> {
        let mut attr = ffi::ibv_qp_attr {
            qp_state: ffi::ibv_qp_state::IBV_QPS_RTS,
            timeout: p.timeout,
            retry_cnt: p.retry_cnt,
            rnr_retry: p.rnr_retry,
            sq_psn: psn,
            max_rd_atomic: p.max_rd_atomic,
            ..Default::default()
        };
        use ffi::ibv_qp_attr_mask as M;
        self.modify(
            &mut attr,
            M::IBV_QP_STATE
                | M::IBV_QP_TIMEOUT
                | M::IBV_QP_RETRY_CNT
                | M::IBV_QP_RNR_RETRY
                | M::IBV_QP_SQ_PSN
                | M::IBV_QP_MAX_QP_RD_ATOMIC,
            "RTS",
            "RTS needs a QP in RTR, timeout <= 31, retry_cnt and rnr_retry <= 7, and \
             max_rd_atomic within the device's max_qp_init_rd_atom",
        )
    }

    /// Changes the incoming-access rights of a connected QP (RTS → RTS).
    pub fn set_access(&self, access: AccessFlags) -> Result<(), VerbsError> {
        let mut attr = ffi::ibv_qp_attr {
            qp_access_flags: access.0,
            ..Default::default()
        };
        self.modify(
            &mut attr,
            ffi::ibv_qp_attr_mask::IBV_QP_ACCESS_FLAGS,
            "access flags",
            "access flags change only on a QP in INIT, RTR or RTS; a QP in ERROR after a refused \
             request accepts nothing until it is reconnected",
        )
    }

    /// Moves the QP to ERROR (flushes its outstanding requests).
    pub fn to_error(&self) -> Result<(), VerbsError> {
        let mut attr = ffi::ibv_qp_attr {
            qp_state: ffi::ibv_qp_state::IBV_QPS_ERR,
            ..Default::default()
        };
        self.modify(
            &mut attr,
            ffi::ibv_qp_attr_mask::IBV_QP_STATE,
            "ERROR",
            "any state may move to ERROR",
        )
    }

    /// Posts one signalled work request.
    ///
    /// # Safety
    /// The local memory named by `op` (and, for WRITE/READ/atomics, the
    /// remote range `(remote_addr, rkey)`) must stay registered and mapped
    /// until this request's completion has been reaped, and the local
    /// buffer must not be reused (written for a WRITE, read for a READ or
    /// an atomic) before then. Inline data is copied at post time.
    pub unsafe fn post_send(
        &self,
        wr_id: u64,
        op: &SendOp,
        remote_addr: u64,
        rkey: u32,
    ) -> Result<(), VerbsError> {
        let mut sge = ffi::ibv_sge::default();
        let mut wr = ffi::ibv_send_wr {
            wr_id,
            next: std::ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
            send_flags: ffi::ibv_send_flags::IBV_SEND_SIGNALED.0,
            ..Default::default()
        };
        match *op {
            SendOp::Write {
                local_addr,
                len,
                lkey,
            } => {
                wr.opcode = ffi::ibv_wr_opcode::IBV_WR_RDMA_WRITE;
                sge = ffi::ibv_sge {
                    addr: local_addr,
                    length: len,
                    lkey,
                };
                wr.wr.rdma = ffi::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 { remote_addr, rkey };
            }
            SendOp::WriteInline { ref data, len } => {
                wr.opcode = ffi::ibv_wr_opcode::IBV_WR_RDMA_WRITE;
                wr.send_flags |= ffi::ibv_send_flags::IBV_SEND_INLINE.0;
                sge = ffi::ibv_sge {
                    addr: data.as_ptr() as u64,
                    length: len.min(data.len() as u32).min(self.max_inline),
                    lkey: 0,
                };
                wr.wr.rdma = ffi::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 { remote_addr, rkey };
            }
            SendOp::Read {
                local_addr,
                len,
                lkey,
            } => {
                wr.opcode = ffi::ibv_wr_opcode::IBV_WR_RDMA_READ;
                sge = ffi::ibv_sge {
                    addr: local_addr,
                    length: len,
                    lkey,
                };
                wr.wr.rdma = ffi::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 { remote_addr, rkey };
            }
            SendOp::CompareSwap {
                local_addr,
                lkey,
                expect,
                swap,
            } => {
                wr.opcode = ffi::ibv_wr_opcode::IBV_WR_ATOMIC_CMP_AND_SWP;
                sge = ffi::ibv_sge {
                    addr: local_addr,
                    length: 8,
                    lkey,
                };
                wr.wr.atomic = ffi::ibv_send_wr__bindgen_ty_2__bindgen_ty_2 {
                    remote_addr,
                    compare_add: expect,
                    swap,
                    rkey,
                };
            }
            SendOp::FetchAdd {
                local_addr,
                lkey,
                add,
            } => {
                wr.opcode = ffi::ibv_wr_opcode::IBV_WR_ATOMIC_FETCH_AND_ADD;
                sge = ffi::ibv_sge {
                    addr: local_addr,
                    length: 8,
                    lkey,
                };
                wr.wr.atomic = ffi::ibv_send_wr__bindgen_ty_2__bindgen_ty_2 {
                    remote_addr,
                    compare_add: add,
                    swap: 0,
                    rkey,
                };
            }
        }
        wr.sg_list = &mut sge;
        let mut bad: *mut ffi::ibv_send_wr = std::ptr::null_mut();
        // SAFETY: `qp` is live; `wr` and `sge` live across the call (the
        // provider copies them, and inline data, into the send queue); the
        // caller guarantees the memory they name.
        let r = unsafe {
            let ctx = (*self.qp).context;
            let post = (*ctx)
                .ops
                .post_send
                .expect("every provider implements post_send");
            post(self.qp, &mut wr, &mut bad)
        };
        if r != 0 {
            return Err(VerbsError::PostSend {
                qpn: self.qpn(),
                source: errno_of(r),
            });
        }
        Ok(())
    }
}

/// `IBV_WC_*` status names, for logs.
pub fn wc_status_name(status: u32) -> &'static str {
    use ffi::ibv_wc_status as S;
    match status {
        S::IBV_WC_SUCCESS => "SUCCESS",
        S::IBV_WC_LOC_LEN_ERR => "LOC_LEN_ERR",
        S::IBV_WC_LOC_QP_OP_ERR => "LOC_QP_OP_ERR",
        S::IBV_WC_LOC_PROT_ERR => "LOC_PROT_ERR",
        S::IBV_WC_WR_FLUSH_ERR => "WR_FLUSH_ERR",
        S::IBV_WC_REM_INV_REQ_ERR => "REM_INV_REQ_ERR",
        S::IBV_WC_REM_ACCESS_ERR => "REM_ACCESS_ERR",
        S::IBV_WC_REM_OP_ERR => "REM_OP_ERR",
        S::IBV_WC_RETRY_EXC_ERR => "RETRY_EXC_ERR",
        S::IBV_WC_RNR_RETRY_EXC_ERR => "RNR_RETRY_EXC_ERR",
        S::IBV_WC_FATAL_ERR => "FATAL_ERR",
        S::IBV_WC_GENERAL_ERR => "GENERAL_ERR",
        _ => "other error",
    }
}
