#!/usr/bin/env bash
# Fetch the Kafka Java client + Kafka command-line tools jars and compile the Java test programs.
#
#   .cache/java/lib/      runtime closure of tests/java/pom.xml (kafka-clients, kafka-tools,
#                         kafka core for ConfigCommand, slf4j-simple, ...)
#   .cache/java/classes/  tests/java/src/*.java compiled with javac
#   .cache/java/connect-lib/  runtime closure of tests/java/connect/pom.xml (Kafka Connect's
#                         distributed worker and the FileStream connectors)
#
# Needs only JDK 17+, Maven and network access to Maven Central. Idempotent: the Maven step is
# skipped when .cache/java/lib.stamp records the current pom's checksum; javac runs only when a
# source is newer than its stamp. Set FORCE=1 to redo both.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."   # repo root
POM=tests/java/pom.xml
OUT=.cache/java
LIB=$OUT/lib
CLASSES=$OUT/classes
LIB_STAMP=$OUT/lib.stamp
CLASSES_STAMP=$OUT/classes.stamp

mkdir -p "$OUT"
pom_sum=$(sha256sum "$POM" | cut -d' ' -f1)

if [[ "${FORCE:-0}" == 1 || ! -f "$LIB_STAMP" || "$(cat "$LIB_STAMP")" != "$pom_sum" ]]; then
  echo "build.sh: fetching jars into $LIB" >&2
  rm -rf "$LIB" "$LIB_STAMP"
  mvn -q -B -ntp -Dstyle.color=never -f "$POM" dependency:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$PWD/$LIB"
  ls "$LIB"/kafka-clients-*.jar "$LIB"/kafka-tools-*.jar >/dev/null   # sanity check
  echo "$pom_sum" > "$LIB_STAMP"
fi

# Kafka Connect (tests/test_connect.py) in a folder of its own: its Jetty/Jersey stay off
# the other programs' classpath.
CONNECT_POM=tests/java/connect/pom.xml
CONNECT_LIB=$OUT/connect-lib
CONNECT_STAMP=$OUT/connect-lib.stamp
connect_sum=$(sha256sum "$CONNECT_POM" | cut -d' ' -f1)
if [[ "${FORCE:-0}" == 1 || ! -f "$CONNECT_STAMP" || "$(cat "$CONNECT_STAMP")" != "$connect_sum" ]]; then
  echo "build.sh: fetching Kafka Connect jars into $CONNECT_LIB" >&2
  rm -rf "$CONNECT_LIB" "$CONNECT_STAMP"
  mvn -q -B -ntp -Dstyle.color=never -f "$CONNECT_POM" dependency:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$PWD/$CONNECT_LIB"
  ls "$CONNECT_LIB"/connect-runtime-*.jar "$CONNECT_LIB"/connect-file-*.jar >/dev/null   # sanity check
  echo "$connect_sum" > "$CONNECT_STAMP"
fi

shopt -s nullglob
sources=(tests/java/src/*.java)
need_compile=0
if [[ "${FORCE:-0}" == 1 || ! -f "$CLASSES_STAMP" || "$LIB_STAMP" -nt "$CLASSES_STAMP" ]]; then
  need_compile=1
else
  for s in "${sources[@]}"; do
    [[ "$s" -nt "$CLASSES_STAMP" ]] && need_compile=1
  done
fi

if [[ $need_compile == 1 ]]; then
  echo "build.sh: compiling ${#sources[@]} source file(s) into $CLASSES" >&2
  rm -rf "$CLASSES" "$CLASSES_STAMP"
  mkdir -p "$CLASSES"
  javac -nowarn -encoding UTF-8 --release 17 -cp "$LIB/*" -d "$CLASSES" "${sources[@]}"
  touch "$CLASSES_STAMP"
fi
echo "build.sh: ok ($LIB, $CLASSES)" >&2
