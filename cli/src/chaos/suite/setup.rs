//! A scenario's setup: its fault plan, topics, sink server, and the fleet of instances
//! with their command line (kafka-eos or a Java subject).

use super::super::fleet::Fleet;
use super::super::instance::InstanceConfig;
use super::super::matrix::{Cell, Workload};
use super::super::net::Net;
use super::super::plan::{Plan, PlanParams};
use super::super::report::ScenarioResult;
use super::super::rng::Rng;
use super::super::sink::Server;
use super::super::subject::{java_command, JavaInstance};
use super::{close_generate, velocity, Ctx, Run, SESSION_TIMEOUT};
use crate::workloads::financial_close;
use kafka_eos_testkit::broker::LocalCluster;

impl<'a, 'r> Run<'a, 'r> {
    pub(super) fn new(
        ctx: &'a Ctx<'a>,
        cluster: Option<&'a mut LocalCluster>,
        cell: Cell,
        rng: &'a mut Rng,
        result: &'r mut ScenarioResult,
    ) -> Result<Run<'a, 'r>, String> {
        let cfg = ctx.cfg;
        let nodes = cluster.as_ref().map(|c| c.node_ids()).unwrap_or_default();
        let params = PlanParams { scale: cfg.fault_scale, nodes, stall: ctx.stall, session: SESSION_TIMEOUT };
        let plan = Plan::new(cell.fault, &params, rng);
        let app = format!("chaos-{}-{}", ctx.run_id, cell.label());
        let (input_topic, output_topic) = (format!("{app}-in"), format!("{app}-out"));
        let rf = cfg.replication.unwrap_or(3);
        let min_isr = if rf >= 3 { "2" } else { "1" };
        let stateful = cell.workload.close();
        let velocity = cell.workload == Workload::Velocity;
        let late_topic = format!("{output_topic}-late");
        let join = cell.workload == Workload::Join;
        let dlq_topic = format!("{output_topic}-dlq");
        let topics = [&input_topic, &output_topic]
            .into_iter()
            .chain((stateful || velocity).then_some(&late_topic))
            .chain(join.then_some(&dlq_topic));
        for t in topics {
            ctx.client
                .create_topic_with(t, cfg.partitions, rf, &[("min.insync.replicas", min_isr)])
                .map_err(|e| format!("creating {t}: {e}"))?;
        }
        std::fs::create_dir_all(&ctx.log_dir).map_err(|e| format!("creating {}: {e}", ctx.log_dir.display()))?;
        let instance = InstanceConfig {
            rebalancing: cfg.rebalancing,
            abort_one_in: plan.abort_one_in,
            session_timeout: SESSION_TIMEOUT,
            transaction_timeout: cfg.transaction_timeout,
            financial_close_payments: stateful.then_some(cfg.records),
            card_velocity: velocity,
            join,
            // One directory per instance slot, kept by the slot's restarts (the fleet puts
            // the slot in for `{slot}`), as a pod's volume would be.
            state_dir: (cell.workload == Workload::CloseDisk).then(|| ctx.log_dir.join("state-{slot}")),
            timer_delay: (cell.workload == Workload::Timers).then_some(cfg.timer_delay),
            // Every other instance of the largest fleet (a storm's three) keeps a copy.
            standby_replicas: if cell.workload == Workload::CloseStandby { 2 } else { 0 },
            zombie_for: plan.zombie_for,
            ..InstanceConfig::copy(&ctx.client.bootstrap, &app, &input_topic, &output_topic, cell.guarantee)
        };
        let mut args = vec!["chaos".to_string(), "instance".to_string()];
        args.extend(instance.to_args());
        if let Some(path) = ctx.client_config {
            args.extend(["--client-config".to_string(), path.display().to_string()]);
        }
        let close_topics = stateful.then(|| instance.financial_close_topics());
        if let Some(t) = &close_topics {
            // The merchant table the pipeline joins, written before any payment.
            let table = [("min.insync.replicas", min_isr), ("cleanup.policy", "compact")];
            ctx.client
                .create_topic_with(&t.merchants, cfg.partitions, rf, &table)
                .and_then(|()| {
                    financial_close::write_merchants(
                        ctx.client,
                        &t.merchants,
                        cfg.partitions,
                        &close_generate(cfg.records),
                    )
                })
                .map_err(|e| format!("writing the merchant table {}: {e}", t.merchants))?;
        }
        let sink = cell.workload.sink().map(Server::start).transpose()?;
        if let (true, Some(pg)) = (velocity, sink.as_ref().and_then(Server::postgres)) {
            pg.psql("postgres", &velocity::alerts_ddl()).map_err(|e| format!("creating the alert table: {e}"))?;
        }
        if let Some(server) = &sink {
            args.extend(["--sink".to_string(), server.spec()]);
        }
        let (exe, args) = match ctx.java {
            Some(apps) => {
                let java = JavaInstance {
                    bootstrap: &instance.bootstrap,
                    app: &app,
                    input: &input_topic,
                    output: &output_topic,
                    session_timeout: SESSION_TIMEOUT,
                    transaction_timeout: cfg.transaction_timeout,
                    status_interval: instance.status_interval,
                    log_dir: &ctx.log_dir,
                };
                java_command(cfg.subject, apps, &java)
            }
            None => (cfg.instance_exe.clone(), args),
        };
        let fleet = Fleet::new(exe, args, ctx.log_dir.clone());
        let timeline = std::fs::File::create(ctx.log_dir.join("steps.log")).ok();
        Ok(Run {
            ctx,
            cluster,
            rng,
            result,
            cell,
            plan,
            input_topic,
            output_topic,
            app,
            close_topics,
            sink,
            fleet,
            zombies: Vec::new(),
            timeline,
            net: Net::new(cfg.unreplicated_prepare),
            crashed_at: Default::default(),
        })
    }
}
