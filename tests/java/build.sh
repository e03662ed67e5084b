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
LIB_STAMP=$LIB.stamp
CLASSES_STAMP=$OUT/classes.stamp

mkdir -p "$OUT"
# One build at a time (two pytest workers may each call this): the second finds the first's
# stamps and does nothing.
exec 9>"$OUT/build.lock"
flock 9

# fetch POM DIR JAR...: the runtime closure of POM into DIR, redone only when POM changed
# (its checksum is kept in DIR.stamp); the JAR globs must match afterwards.
fetch() {
  local pom=$1 dir=$2 stamp=$2.stamp sum
  shift 2
  sum=$(sha256sum "$pom" | cut -d' ' -f1)
  if [[ "${FORCE:-0}" == 1 || ! -f "$stamp" || "$(cat "$stamp")" != "$sum" ]]; then
    echo "build.sh: fetching jars of $pom into $dir" >&2
    rm -rf "$dir" "$stamp"
    mvn -q -B -ntp -Dstyle.color=never -f "$pom" dependency:copy-dependencies \
        -DincludeScope=runtime -DoutputDirectory="$PWD/$dir"
    for jar in "$@"; do ls "$dir"/$jar >/dev/null; done   # sanity check
    echo "$sum" > "$stamp"
  fi
}

fetch "$POM" "$LIB" 'kafka-clients-*.jar' 'kafka-tools-*.jar'
# Kafka Connect (tests/test_connect.py, tests/test_mirror_maker.py) in a folder of its own:
# its Jetty/Jersey stay off the other programs' classpath.
fetch tests/java/connect/pom.xml "$OUT/connect-lib" 'connect-runtime-*.jar' 'connect-file-*.jar' 'connect-mirror-*.jar'

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
