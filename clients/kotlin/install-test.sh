#!/usr/bin/env bash
# The README's "Install", as written, from a fresh clone: `git clone` of this repository's committed HEAD into a
# temporary folder, the README's ```sh block of that section run there verbatim, then a tiny project whose pom.xml
# holds the README's ```xml dependency block, compiled and run against the installed artifact. Maven's local
# repository is a temporary copy of ~/.m2/repository (MAVEN_OPTS=-Dmaven.repo.local=...), without any com.fenecdb
# artifact, so the test proves the install and leaves the user's repository alone. test.sh runs it after mvn verify.
set -eu
cd "$(dirname "$0")"
root="$(cd ../.. && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

section() { # the text of README.md's "## Install" section
  awk '/^## Install$/ {on=1; next} /^## / {on=0} on' README.md
}
block() { # the first ```$1 block of that section
  section | awk -v lang="$1" '$0 == "```" lang {on=1; next} on && /^```$/ {exit} on'
}
install="$(block sh)"
dependency="$(block xml)"
[ -n "$install" ] && [ -n "$dependency" ] || { echo "FAILED: README.md's Install has no sh or no xml block"; exit 1; }

git clone -q "$root" "$tmp/clone"
mkdir -p "$tmp/m2"
[ -d "$HOME/.m2/repository" ] && cp -r "$HOME/.m2/repository/." "$tmp/m2/"
rm -rf "$tmp/m2/com/fenecdb"
export MAVEN_OPTS="${MAVEN_OPTS:-} -Dmaven.repo.local=$tmp/m2"

echo "install-test: in a fresh clone: $install"
(cd "$tmp/clone" && bash -euc "$install") > "$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; echo "FAILED: the README's install"; exit 1; }

app="$tmp/app"
mkdir -p "$app/src/main/kotlin"
kotlin_version="$(sed -n 's:.*<kotlin.version>\(.*\)</kotlin.version>.*:\1:p' pom.xml)"
cat > "$app/pom.xml" <<POM
<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>example</groupId>
  <artifactId>app</artifactId>
  <version>1</version>
  <properties><kotlin.compiler.jvmTarget>17</kotlin.compiler.jvmTarget><kotlin.compiler.daemon>false</kotlin.compiler.daemon></properties>
  <dependencies>
$dependency
  </dependencies>
  <build>
    <sourceDirectory>src/main/kotlin</sourceDirectory>
    <plugins>
      <plugin>
        <groupId>org.jetbrains.kotlin</groupId>
        <artifactId>kotlin-maven-plugin</artifactId>
        <version>$kotlin_version</version>
        <executions><execution><id>compile</id><goals><goal>compile</goal></goals></execution></executions>
      </plugin>
      <plugin>
        <groupId>org.apache.maven.plugins</groupId>
        <artifactId>maven-dependency-plugin</artifactId>
        <version>3.8.1</version>
      </plugin>
    </plugins>
  </build>
</project>
POM
cat > "$app/src/main/kotlin/App.kt" <<'KT'
import com.fenecdb.Fenec
import com.fenecdb.Query
import com.fenecdb.Worker
import com.fenecdb.WorkerOptions

fun main() {
    val worker = Worker(Fenec.connect("http://127.0.0.1:8080"), "jobs", WorkerOptions(name = "w1"))
    println("${Query.from(worker.queue).where("id", 1).toDelete(require = 1).text} by ${worker.name}")
}
KT
(cd "$app" && mvn -B -q -ntp -Dstyle.color=never compile dependency:build-classpath -Dmdep.outputFile=cp.txt) > "$tmp/app.log" 2>&1 \
  || { cat "$tmp/app.log"; echo "FAILED: a project depending on the installed artifact did not build"; exit 1; }
said="$(java -cp "$app/target/classes:$(cat "$app/cp.txt")" AppKt)"
[ "$said" = 'del jobs where id = $1 require 1 by w1' ] || { echo "FAILED: the project said: $said"; exit 1; }
echo "install-test: ok (the README's install, then a project depending on com.fenecdb:fenecdb, built and run)"
