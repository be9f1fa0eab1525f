//! The LogGP model of RDMA and UD transfers used by DARE (§2.3, Table 1),
//! which the simulator uses to time every operation.

/// LogGP parameters of one transfer class. Times in nanoseconds, gaps in
/// nanoseconds per byte (DARE gives µs/KB).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LogGp {
    /// CPU overhead of issuing (o).
    pub o_ns: f64,
    /// Latency (L).
    pub l_ns: f64,
    /// Gap per byte for the first MTU (G).
    pub g_ns_per_byte: f64,
    /// Gap per byte after the first MTU (G_m).
    pub gm_ns_per_byte: f64,
}

const fn us_per_kb(v: f64) -> f64 {
    // µs/KB → ns/byte: 1 µs = 1000 ns, 1 KB = 1024 bytes.
    v * 1000.0 / 1024.0
}

/// The parameters of DARE's Table 1 (12-node InfiniBand QDR cluster).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NetParams {
    /// Polling overhead o_p.
    pub poll_ns: f64,
    /// RDMA read.
    pub rdma_read: LogGp,
    /// RDMA write.
    pub rdma_write: LogGp,
    /// RDMA write with inline data.
    pub rdma_write_inline: LogGp,
    /// Unreliable datagram (client requests and replies).
    pub ud: LogGp,
    /// Unreliable datagram, inline.
    pub ud_inline: LogGp,
    /// MTU (m).
    pub mtu_bytes: u64,
    /// Writes up to this size are sent inline.
    pub inline_bytes_max: u64,
    /// RC retry timeout: an unanswered request completes with an error
    /// after this long.
    pub retry_timeout_ns: u64,
    /// Multiplies every latency (swarm runs vary the network speed).
    pub latency_scale: f64,
}

impl NetParams {
    /// DARE Table 1.
    pub const DARE: NetParams = NetParams {
        poll_ns: 70.0,
        rdma_read: LogGp {
            o_ns: 290.0,
            l_ns: 1380.0,
            g_ns_per_byte: us_per_kb(0.75),
            gm_ns_per_byte: us_per_kb(0.26),
        },
        rdma_write: LogGp {
            o_ns: 260.0,
            l_ns: 1610.0,
            g_ns_per_byte: us_per_kb(0.76),
            gm_ns_per_byte: us_per_kb(0.25),
        },
        rdma_write_inline: LogGp {
            o_ns: 360.0,
            l_ns: 930.0,
            g_ns_per_byte: us_per_kb(2.21),
            gm_ns_per_byte: us_per_kb(2.21),
        },
        ud: LogGp {
            o_ns: 620.0,
            l_ns: 850.0,
            g_ns_per_byte: us_per_kb(0.77),
            gm_ns_per_byte: us_per_kb(0.77),
        },
        ud_inline: LogGp {
            o_ns: 470.0,
            l_ns: 540.0,
            g_ns_per_byte: us_per_kb(1.92),
            gm_ns_per_byte: us_per_kb(1.92),
        },
        mtu_bytes: 4096,
        inline_bytes_max: 256,
        retry_timeout_ns: 100_000,
        latency_scale: 1.0,
    };

    /// Equation (1) without o and o_p: the wire part (L plus the gaps) of
    /// an RDMA access of `bytes`.
    pub fn rdma_wire_ns(&self, p: &LogGp, bytes: u64) -> f64 {
        let s = bytes.max(1) as f64;
        let m = self.mtu_bytes as f64;
        let gaps = if s <= m {
            (s - 1.0) * p.g_ns_per_byte
        } else {
            (m - 1.0) * p.g_ns_per_byte + (s - m) * p.gm_ns_per_byte
        };
        (p.l_ns + gaps) * self.latency_scale
    }

    /// Equation (1): the full time of an RDMA access (o + L + gaps + o_p).
    pub fn rdma_ns(&self, p: &LogGp, bytes: u64) -> f64 {
        p.o_ns + self.rdma_wire_ns(p, bytes) + self.poll_ns
    }

    /// Equation (2): time of a UD transfer of `bytes` (2o + L + (s-1)G).
    pub fn ud_ns(&self, bytes: u64) -> f64 {
        let p = if bytes <= self.inline_bytes_max {
            &self.ud_inline
        } else {
            &self.ud
        };
        2.0 * p.o_ns + (p.l_ns + (bytes.max(1) as f64 - 1.0) * p.g_ns_per_byte) * self.latency_scale
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equation_one_matches_table_one() {
        let n = NetParams::DARE;
        // A 1-byte write: o + L + o_p = 0.26 + 1.61 + 0.07 µs.
        assert!((n.rdma_ns(&n.rdma_write, 1) - 1940.0).abs() < 1e-6);
        // Beyond the MTU the per-byte gap drops to G_m.
        let small = n.rdma_ns(&n.rdma_read, 4096);
        let big = n.rdma_ns(&n.rdma_read, 8192);
        assert!((big - small - 4096.0 * us_per_kb(0.26)).abs() < 1e-6);
        assert!(n.ud_ns(64) < n.ud_ns(2048));
    }
}
