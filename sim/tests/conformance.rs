//! The fabric conformance suite on the simulated fabric (the host runs the
//! same suite on the shared-memory and ibverbs fabrics).

use verbatim_sim::conformance::{run_all, SimHarness};

#[test]
fn simulated_fabric_passes_the_conformance_suite() {
    let failures = run_all(SimHarness::new);
    assert!(failures.is_empty(), "{failures:#?}");
}

/// The suite is not vacuous: a fabric that ignores revokes fails it.
#[test]
fn a_fabric_that_ignores_revokes_fails_the_suite() {
    use verbatim_core::fabric::{
        Access, Channel, Completion, Fabric, FabricError, MemberId, RegionId, WorkRequest,
    };
    use verbatim_core::layout::Layout;
    use verbatim_core::mem::Memory;
    use verbatim_sim::conformance::{checks, FabricHarness, SimEndpoint};

    struct IgnoresRevokes(SimHarness, Ignoring);
    struct Ignoring(*mut SimEndpoint);
    impl Fabric for Ignoring {
        fn post(&mut self, wr: &WorkRequest) {
            // SAFETY: the pointer was taken from the harness just before
            // this call and the harness outlives it (single-threaded test).
            unsafe { (*self.0).post(wr) }
        }
        fn poll_completion(&mut self) -> Option<Completion> {
            None
        }
        fn set_access(
            &mut self,
            peer: MemberId,
            region: RegionId,
            access: Access,
        ) -> Result<(), FabricError> {
            if access == Access::Revoked {
                return Ok(()); // the bug: claims success, changes nothing
            }
            // SAFETY: as above.
            unsafe { (*self.0).set_access(peer, region, access) }
        }
        fn reconnect(&mut self, peer: MemberId, channel: Channel) -> Result<(), FabricError> {
            // SAFETY: as above.
            unsafe { (*self.0).reconnect(peer, channel) }
        }
    }
    impl FabricHarness for IgnoresRevokes {
        type F = Ignoring;
        fn layout(&self) -> Layout {
            self.0.layout()
        }
        fn fabric(&mut self, m: MemberId) -> &mut Ignoring {
            self.1 = Ignoring(self.0.fabric(m) as *mut SimEndpoint);
            &mut self.1
        }
        fn memory(&self, m: MemberId) -> &dyn Memory {
            self.0.memory(m)
        }
        fn next_completion(&mut self, m: MemberId) -> Option<Completion> {
            self.0.next_completion(m)
        }
        fn kill(&mut self, m: MemberId) {
            self.0.kill(m)
        }
        fn name(&self) -> &'static str {
            "broken"
        }
    }
    let (_, revoke) = checks::<IgnoresRevokes>()
        .into_iter()
        .find(|(n, _)| n.contains("revoked"))
        .expect("the suite has a revoke check");
    let mut h = IgnoresRevokes(SimHarness::new(), Ignoring(std::ptr::null_mut()));
    assert!(revoke(&mut h).is_err());
}
