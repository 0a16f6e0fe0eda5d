//! The fault plans' tests: schedules, presets and names.

use super::*;

fn params(scale: usize) -> PlanParams {
    PlanParams { scale, nodes: vec![1, 2, 3], stall: secs(15), session: secs(6) }
}

#[test]
fn plans_have_the_required_faults_in_time_order() {
    let mut rng = Rng::new(42);
    let count = |sc, scale, rng: &mut Rng| Plan::new(sc, &params(scale), rng).faults();
    assert!(count(Scenario::ProcessKill, 1, &mut rng) >= 10);
    assert!(count(Scenario::ProcessBounce, 1, &mut rng) >= 5);
    assert_eq!(count(Scenario::BrokerKill, 1, &mut rng), 3);
    assert_eq!(count(Scenario::ProcessKill, 10, &mut rng), 100);
    assert_eq!(count(Scenario::FinancialClose, 1, &mut rng), 9, "8 kills and a broker crash");
    for sc in [Scenario::PostgresSink, Scenario::RedisSink, Scenario::RedisNoDedup] {
        let plan = Plan::new(sc, &params(1), &mut rng);
        assert_eq!(plan.faults(), 7, "{sc}: 6 instance kills and a server crash");
        assert!(plan.steps.iter().any(|s| s.action == Action::SinkRestart), "{sc}");
        assert!(sc.preset().and_then(|w| w.sink()).is_some() && !sc.needs_broker_control(), "{sc}");
    }
    for sc in Scenario::ALL {
        let plan = Plan::new(sc, &params(2), &mut rng);
        assert!(plan.steps.windows(2).all(|w| w[0].at <= w[1].at), "{sc}");
        assert!(plan.steps.last().is_none_or(|s| s.at < plan.duration), "{sc}");
    }
}

#[test]
fn network_faults_are_healed_and_counted() {
    let mut rng = Rng::new(9);
    for (sc, faults) in [
        (Scenario::EndTxnHeld, 3),
        (Scenario::ProduceHeld, 3),
        (Scenario::CoordinatorCut, 3),
        (Scenario::GroupCoordinatorCut, 2),
        (Scenario::MemberCut, 2),
        (Scenario::ZombieReconcile, 2),
        (Scenario::SlowBroker, 1),
    ] {
        let plan = Plan::new(sc, &params(1), &mut rng);
        assert!(sc.network() && sc.needs_broker_control(), "{sc}");
        assert_eq!(plan.faults(), faults, "{sc}");
        // Every fault is followed by a heal, and nothing else is in between.
        for w in plan.steps.chunks(2) {
            assert!(matches!(w[0].action, Action::Net(f) if f != NetFault::HealAll), "{sc}");
            assert_eq!(w[1].action, Action::Net(NetFault::HealAll), "{sc}");
        }
        // A zombie's tasks are told 20 s late: the next cut waits for them.
        let bound = if sc == Scenario::ZombieReconcile { secs(75) } else { secs(60) };
        assert!(plan.duration < bound, "{sc}: {:?} is too long for CI", plan.duration);
    }
}

/// The zombie's cut: its instances' tasks are told late; the next cut comes only after they
/// were; a plain member cut makes no zombie.
#[test]
fn a_zombie_is_told_before_the_next_cut() {
    let plan = Plan::new(Scenario::ZombieReconcile, &params(1), &mut Rng::new(3));
    let late = plan.zombie_for.expect("the instances' tasks are told late");
    assert!(plan.steps[2].at - plan.steps[0].at > params(1).session + late, "{:?}", plan.steps);
    assert!(Plan::new(Scenario::MemberCut, &params(1), &mut Rng::new(3)).zombie_for.is_none());
}

#[test]
fn every_broker_goes_down_once_and_comes_back() {
    let plan = Plan::new(Scenario::BrokerBounce, &params(1), &mut Rng::new(1));
    let mut downs: Vec<i32> = plan
        .steps
        .iter()
        .filter_map(|s| match s.action {
            Action::BrokerDown { node, hard: false } => Some(node),
            _ => None,
        })
        .collect();
    downs.sort();
    assert_eq!(downs, vec![1, 2, 3]);
    // Never two brokers down at once: every down is followed by its up.
    for w in plan.steps.chunks(2) {
        assert!(
            matches!((w[0].action, w[1].action), (Action::BrokerDown { node: a, .. }, Action::BrokerUp { node: b }) if a == b)
        );
    }
}

#[test]
fn coordinator_kills_alternate_with_restarts_and_vary_their_timing() {
    let plan = Plan::new(Scenario::CoordinatorKill, &params(67), &mut Rng::new(5));
    assert_eq!(plan.faults(), 201, "the issue asks for at least 200 aimed kills");
    assert!(Scenario::CoordinatorKill.needs_broker_control() && !Scenario::CoordinatorKill.network());
    let mut timings = std::collections::HashSet::new();
    for w in plan.steps.chunks(2) {
        match (w[0].action, w[1].action) {
            (Action::KillCoordinatorMidCommit { timing }, Action::RestartDownBrokers) => {
                assert!(w[0].fault && !w[1].fault);
                if let KillTiming::AfterEndTxn(ms) = timing {
                    assert!(ms <= 30, "{ms}");
                }
                timings.insert(timing);
            }
            other => panic!("a kill and its restart, got {other:?}"),
        }
    }
    assert!(timings.contains(&KillTiming::BeforeEndTxn) && timings.len() > 10, "{timings:?}");
}

#[test]
fn storm_goes_1_3_1_2_and_stalls_resume() {
    let plan = Plan::new(Scenario::RebalanceStorm, &params(1), &mut Rng::new(3));
    assert_eq!(plan.instances, 1);
    let sizes: Vec<usize> =
        plan.steps.iter().filter_map(|s| if let Action::Scale(n) = s.action { Some(n) } else { None }).collect();
    assert_eq!(sizes, vec![3, 1, 2]);
    let plan = Plan::new(Scenario::Stall, &params(1), &mut Rng::new(3));
    let stalls = plan.steps.iter().filter(|s| matches!(s.action, Action::Stall { .. })).count();
    let resumes = plan.steps.iter().filter(|s| s.action == Action::Resume).count();
    assert_eq!((stalls, resumes, plan.faults()), (4, 4, 4));
    assert!(plan.steps.iter().any(|s| s.action == Action::Stall { at: StallAt::AfterCommit }));
    assert!("nope".parse::<Scenario>().unwrap_err().contains("process-kill"));
    for sc in Scenario::ALL {
        assert_eq!(sc.name().parse::<Scenario>(), Ok(sc));
        assert!(sc.name().len() <= 16, "{sc} fits the table's column");
    }
    assert_eq!("stall".parse::<Scenario>(), Ok(Scenario::Stall));
}
