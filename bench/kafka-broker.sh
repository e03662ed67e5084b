#!/usr/bin/env bash
# One Apache Kafka broker for `runnel chaos --broker-command bench/kafka-broker.sh`: runnel
# chaos starts it where it would start a Runnel broker (its network namespace, ports and
# region) and passes those in the environment (RUNNEL_BROKER_*, see docs/chaos.md). A
# broker among RUNNEL_CONTROLLER_VOTERS is a KRaft broker and controller (combined mode),
# the others brokers only, as Runnel's voters and observers are; laid out as a stretched
# Kafka cluster is: broker.rack = its region, min.insync.replicas=2, RackAwareReplicaSelector so
# consumers with client.rack read from their region's replica. Formats its log dir on the
# first start and execs the JVM (so the pid chaos signals is Kafka's).
#
# Needs the jars of ../shared/peers/kafka/install.sh (PEERS_KAFKA_HOME, default
# /tmp/peers/kafka). KAFKA_HEAP_OPTS: heap per broker (default -Xms384m -Xmx384m).
set -euo pipefail
: "${RUNNEL_BROKER_ID:?} ${RUNNEL_BROKER_HOST:?} ${RUNNEL_BROKER_PORT:?} ${RUNNEL_BROKER_CONTROLLER_PORT:?}"
: "${RUNNEL_BROKER_DATA_DIR:?} ${RUNNEL_CONTROLLER_VOTERS:?}"
KAFKA_LIB="${PEERS_KAFKA_HOME:-/tmp/peers/kafka}/lib"
ls "$KAFKA_LIB"/kafka_2.13-*.jar >/dev/null 2>&1 || { echo "no Kafka jars in $KAFKA_LIB: run ../shared/peers/kafka/install.sh" >&2; exit 1; }
# One cluster id for every broker of every run (a base64 UUID); each run has fresh dirs.
CLUSTER_ID=UnVubmVsQ2hhb3NLYWZrYQ
DATA="$RUNNEL_BROKER_DATA_DIR"
mkdir -p "$DATA"
CFG="$DATA/server.properties"
RF=$(( ${RUNNEL_BROKERS:-3} < 3 ? ${RUNNEL_BROKERS:-3} : 3 ))
ROLES=broker
LISTENERS=PLAINTEXT://$RUNNEL_BROKER_HOST:$RUNNEL_BROKER_PORT
if [[ ",$RUNNEL_CONTROLLER_VOTERS" == *",$RUNNEL_BROKER_ID@"* ]]; then
  ROLES=broker,controller
  LISTENERS="$LISTENERS,CONTROLLER://$RUNNEL_BROKER_HOST:$RUNNEL_BROKER_CONTROLLER_PORT"
fi
cat > "$CFG" <<PROPS
process.roles=$ROLES
node.id=$RUNNEL_BROKER_ID
controller.quorum.voters=$RUNNEL_CONTROLLER_VOTERS
listeners=$LISTENERS
advertised.listeners=PLAINTEXT://$RUNNEL_BROKER_HOST:$RUNNEL_BROKER_PORT
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$DATA/log
broker.rack=${RUNNEL_BROKER_REGION:-}
replica.selector.class=org.apache.kafka.common.replica.RackAwareReplicaSelector
default.replication.factor=$RF
min.insync.replicas=$(( RF < 2 ? 1 : 2 ))
offsets.topic.replication.factor=$RF
transaction.state.log.replication.factor=$RF
transaction.state.log.min.isr=$(( RF < 2 ? 1 : 2 ))
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
num.network.threads=2
num.io.threads=4
PROPS
# runnel chaos's --set settings, in Kafka's names (later lines win).
if [[ -n "${RUNNEL_BROKER_SETTINGS:-}" ]]; then printf '%s\n' "$RUNNEL_BROKER_SETTINGS" >> "$CFG"; fi
if [[ ! -f "$DATA/log/meta.properties" ]]; then
  java -Xmx256m -XX:TieredStopAtLevel=1 -cp "$KAFKA_LIB/*" kafka.tools.StorageTool format --ignore-formatted \
    -t "$CLUSTER_ID" -c "$CFG" >"$DATA/format.out" 2>&1 || { cat "$DATA/format.out" >&2; exit 1; }
fi
cat > "$DATA/log4j2.properties" <<'L4J'
status = error
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.out.ref = OUT
logger.kafka.name = kafka.server.KafkaServer
logger.kafka.level = INFO
L4J
exec java ${KAFKA_HEAP_OPTS:--Xms384m -Xmx384m} -server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
  -Djava.awt.headless=true -Dlog4j2.configurationFile="$DATA/log4j2.properties" \
  -cp "$KAFKA_LIB/*" kafka.Kafka "$CFG"
