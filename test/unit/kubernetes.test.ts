import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { z } from 'zod';
import { loadConfig, type Role } from '../../src/config.js';

/**
 * deploy/kubernetes against the code: the manifests' shape (our own checks: kubeconform and
 * kubeval need the Kubernetes schemas, which are not available offline), the pieces issue 36
 * names, and every environment variable set there being one src/config.ts reads, enough for each
 * role to start.
 */
const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const DIR = join(ROOT, 'deploy/kubernetes');
const read = (file: string): string => readFileSync(join(ROOT, file), 'utf8');
const onPath = (command: string): boolean => (process.env.PATH ?? '').split(delimiter).some((dir) => dir !== '' && existsSync(join(dir, command)));

const Metadata = z.object({
  name: z.string(),
  namespace: z.string().optional(),
  labels: z.record(z.string(), z.string()).optional(),
  annotations: z.record(z.string(), z.string()).optional(),
});
const Manifest = z.object({ apiVersion: z.string(), kind: z.string(), metadata: Metadata });
type Manifest = z.infer<typeof Manifest> & { raw: unknown; file: string };

const Labels = z.record(z.string(), z.string());
const Probe = z.object({ httpGet: z.object({ path: z.string(), port: z.union([z.string(), z.number()]) }) });
const EnvVar = z.object({
  name: z.string(),
  value: z.string().optional(),
  valueFrom: z
    .object({
      secretKeyRef: z.object({ name: z.string(), key: z.string(), optional: z.boolean().optional() }).optional(),
      configMapKeyRef: z.object({ name: z.string(), key: z.string(), optional: z.boolean().optional() }).optional(),
    })
    .optional(),
});
const Container = z.object({
  name: z.string(),
  image: z.string(),
  ports: z.array(z.object({ name: z.string(), containerPort: z.number() })),
  env: z.array(EnvVar).default([]),
  envFrom: z.array(z.object({ configMapRef: z.object({ name: z.string() }).optional(), secretRef: z.object({ name: z.string() }).optional() })).default([]),
  resources: z.object({
    requests: z.object({ cpu: z.string(), memory: z.string() }),
    limits: z.object({ memory: z.string() }),
  }),
  startupProbe: Probe,
  livenessProbe: Probe,
  readinessProbe: Probe,
  lifecycle: z.object({ preStop: z.object({ exec: z.object({ command: z.array(z.string()) }) }) }).optional(),
});
const Deployment = z.object({
  spec: z.object({
    replicas: z.number().optional(),
    selector: z.object({ matchLabels: Labels }),
    strategy: z.object({ type: z.enum(['RollingUpdate', 'Recreate']) }),
    template: z.object({
      metadata: z.object({ labels: Labels, annotations: z.record(z.string(), z.string()).default({}) }),
      spec: z.object({ terminationGracePeriodSeconds: z.number(), containers: z.array(Container).length(1) }),
    }),
  }),
});
const Service = z.object({
  spec: z.object({ selector: Labels, ports: z.array(z.object({ port: z.number(), targetPort: z.union([z.string(), z.number()]) })) }),
});
const Hpa = z.object({
  spec: z.object({
    scaleTargetRef: z.object({ apiVersion: z.string(), kind: z.string(), name: z.string() }),
    minReplicas: z.number(),
    maxReplicas: z.number(),
    metrics: z.array(
      z.object({ type: z.string(), resource: z.object({ name: z.string(), target: z.object({ type: z.string(), averageUtilization: z.number() }) }) }),
    ),
  }),
});
const Pdb = z.object({ spec: z.object({ minAvailable: z.number(), selector: z.object({ matchLabels: Labels }) }) });
const ConfigMap = z.object({ data: z.record(z.string(), z.string()) });
const Secret = z.object({ stringData: z.record(z.string(), z.string()) });
const Ingress = z.object({
  spec: z.object({
    rules: z.array(
      z.object({
        http: z.object({
          paths: z.array(z.object({ path: z.string(), pathType: z.enum(['Exact', 'Prefix']), backend: z.object({ service: z.object({ name: z.string() }) }) })),
        }),
      }),
    ),
  }),
});
const Kustomization = z.object({ namespace: z.string(), resources: z.array(z.string()) });

const files = readdirSync(DIR)
  .filter((f) => f.endsWith('.yaml'))
  .sort();
/** What did not parse as YAML or as a Kubernetes object, by file: the first test reports it. */
const unparsable: string[] = [];
const manifests: Manifest[] = files.flatMap((file) =>
  parseAllDocuments(readFileSync(join(DIR, file), 'utf8')).flatMap((doc) => {
    const problems = [...doc.errors, ...doc.warnings].map((e) => e.message);
    if (problems.length > 0) {
      unparsable.push(`${file}: ${problems.join('; ')}`);
      return [];
    }
    const raw: unknown = doc.toJS();
    // A Kustomization has no metadata: give it a name so that it reads like the others.
    const parsed = Manifest.safeParse(file === 'kustomization.yaml' ? { ...(raw as object), metadata: { name: 'kustomization' } } : raw);
    if (!parsed.success) {
      unparsable.push(`${file}: ${parsed.error.message}`);
      return [];
    }
    return [{ ...parsed.data, raw, file }];
  }),
);
const one = <T>(schema: z.ZodType<T>, kind: string, name: string): T => {
  const found = manifests.filter((m) => m.kind === kind && m.metadata.name === name);
  expect(found, `${kind}/${name}`).toHaveLength(1);
  return schema.parse(found[0]?.raw);
};
const ofKind = (kind: string): Manifest[] => manifests.filter((m) => m.kind === kind);

const ROLES = ['gateway', 'api', 'projector'] as const satisfies readonly Role[];
const deployment = (role: string) => one(Deployment, 'Deployment', role);
const containerOf = (role: string) => deployment(role).spec.template.spec.containers[0] as z.infer<typeof Container>;
const selects = (selector: Record<string, string>, labels: Record<string, string>): boolean => Object.entries(selector).every(([k, v]) => labels[k] === v);

/** The environment variables the configuration's zod schema (`const Env = z.object({…})` in src/config.ts) reads. */
function configEnvNames(): Set<string> {
  const source = read('src/config.ts');
  const start = source.indexOf('const Env = z.object({');
  const end = source.indexOf('\n});', start);
  expect(start, 'the Env schema in src/config.ts').toBeGreaterThanOrEqual(0);
  return new Set([...source.slice(start, end).matchAll(/^ {2}([A-Z][A-Z0-9_]*):/gm)].map((m) => m[1] as string));
}
const CHAIN_IDS: string[] = (JSON.parse(read('config/chains.json')) as { chains: Array<{ id: string }> }).chains.map((c) => c.id);
/** Read by the chain registry (src/gateway/chains.ts) from the same environment: CHAINS_CONFIG and UPSTREAM_<ID>[_WS]. */
const readByChainRegistry = (name: string): boolean =>
  name === 'CHAINS_CONFIG' || CHAIN_IDS.some((id) => name === `UPSTREAM_${id.toUpperCase()}` || name === `UPSTREAM_${id.toUpperCase()}_WS`);

/** The image's own ENV lines (Dockerfile), which the pods start with. */
function imageEnv(): Record<string, string> {
  const pairs = read('Dockerfile')
    .split('\n')
    .filter((l) => l.startsWith('ENV '))
    .flatMap((l) => l.slice(4).trim().split(/\s+/));
  return Object.fromEntries(pairs.map((p) => p.split('=', 2) as [string, string]));
}

const configMap = () => one(ConfigMap, 'ConfigMap', 'gateway-config').data;
const secretExample = () => one(Secret, 'Secret', 'gateway-secrets').stringData;

/** A role's environment as Kubernetes would give it, with the Secret example's values. */
function roleEnv(role: string): Record<string, string> {
  const container = containerOf(role);
  const env: Record<string, string> = { ...imageEnv() };
  for (const from of container.envFrom) {
    expect(from.secretRef, 'secrets by key (secretKeyRef), so each role gets only its own').toBeUndefined();
    expect(from.configMapRef?.name).toBe('gateway-config');
    Object.assign(env, configMap());
  }
  for (const v of container.env) {
    const ref = v.valueFrom?.secretKeyRef;
    if (v.value !== undefined) env[v.name] = v.value;
    else if (ref) {
      expect(ref.name).toBe('gateway-secrets');
      const value = secretExample()[ref.key];
      if (value !== undefined) env[v.name] = value;
      else expect(ref.optional, `${role}: ${ref.key} is required but not in secret.example.yaml`).toBe(true);
    } else throw new Error(`${role}: ${v.name} has neither a value nor a secretKeyRef`);
  }
  return env;
}

const bytes = (quantity: string): number => {
  const m = /^(\d+)(Mi|Gi)$/.exec(quantity);
  if (!m) throw new Error(`unexpected memory quantity ${quantity}`);
  return Number(m[1]) * (m[2] === 'Gi' ? 1024 ** 3 : 1024 ** 2);
};

describe('deploy/kubernetes', () => {
  it('parses, every document a Kubernetes object of a kind we mean to ship', () => {
    expect(unparsable).toEqual([]);
    expect(files).toEqual(
      expect.arrayContaining([
        'kustomization.yaml',
        'namespace.yaml',
        'config.yaml',
        'secret.example.yaml',
        'gateway.yaml',
        'api.yaml',
        'projector.yaml',
        'ingress.example.yaml',
      ]),
    );
    const kinds = new Set(manifests.map((m) => m.kind));
    expect([...kinds].sort()).toEqual([
      'ConfigMap',
      'Deployment',
      'HorizontalPodAutoscaler',
      'Ingress',
      'Kustomization',
      'Namespace',
      'PodDisruptionBudget',
      'Secret',
      'Service',
    ]);
    expect(ofKind('Namespace').map((m) => m.metadata.name)).toEqual(['chain-gateway']);
  });

  it('kustomization.yaml applies every manifest but the examples, into the namespace', () => {
    const kustomization = Kustomization.parse(manifests.find((m) => m.kind === 'Kustomization')?.raw);
    expect(kustomization.namespace).toBe('chain-gateway');
    const applied = files.filter((f) => f !== 'kustomization.yaml' && !f.endsWith('.example.yaml'));
    expect([...kustomization.resources].sort()).toEqual(applied);
    // The Secret example is applied by hand, so it names the namespace itself.
    expect(manifests.find((m) => m.kind === 'Secret')?.metadata.namespace).toBe('chain-gateway');
  });

  it('runs each role from the image with probes on /healthz (startup, liveness) and /readyz (readiness) on its port', () => {
    const port = Number(imageEnv().PORT);
    expect(port).toBe(8080);
    for (const role of ROLES) {
      const d = deployment(role);
      const c = containerOf(role);
      expect(c.image, role).toBe('chain-gateway');
      expect(c.ports, role).toEqual([{ name: 'http', containerPort: port }]);
      expect(c.env.find((v) => v.name === 'ROLE')?.value, role).toBe(role);
      expect(selects(d.spec.selector.matchLabels, d.spec.template.metadata.labels), role).toBe(true);
      for (const probe of [c.startupProbe, c.livenessProbe]) expect(probe.httpGet, role).toEqual({ path: '/healthz', port: 'http' });
      expect(c.readinessProbe.httpGet, role).toEqual({ path: '/readyz', port: 'http' });
      // Scraped where Prometheus discovers pods.
      expect(d.spec.template.metadata.annotations, role).toMatchObject({
        'prometheus.io/scrape': 'true',
        'prometheus.io/port': String(port),
        'prometheus.io/path': '/metrics',
      });
      expect(bytes(c.resources.limits.memory), role).toBeGreaterThanOrEqual(bytes(c.resources.requests.memory));
    }
  });

  it('sizes each role from the measured figures: the gateway request above its measured RSS, a core each', () => {
    const gateway = containerOf('gateway').resources;
    // 151-156 MB measured with 100,000 tokens cached (bench/README.md), up to 216 MB under sustained calls.
    expect(bytes(gateway.requests.memory)).toBeGreaterThanOrEqual(200 * 1e6);
    expect(bytes(gateway.limits.memory)).toBeGreaterThanOrEqual(400 * 1e6);
    expect(gateway.requests.cpu).toBe('1');
    // ROLE=all measured 287 MB right after projecting 100,000 tokens.
    expect(bytes(containerOf('projector').resources.limits.memory)).toBeGreaterThanOrEqual(512 * 1024 ** 2);
  });

  it('stops routing to a pod before it drains: preStop sleep, then a grace period that covers a request and the flush', () => {
    for (const role of ['gateway', 'api']) {
      const c = containerOf(role);
      const command = c.lifecycle?.preStop.exec.command ?? [];
      expect(command[0], role).toBe('sleep');
      const sleepSeconds = Number(command[1]);
      expect(sleepSeconds, role).toBeGreaterThanOrEqual(5);
      const config = loadConfig(roleEnv(role));
      const requestSeconds = config.http.requestTimeoutMs / 1000;
      expect(deployment(role).spec.template.spec.terminationGracePeriodSeconds, role).toBeGreaterThan(sleepSeconds + requestSeconds);
    }
  });

  it('scales the gateway horizontally: an HPA on CPU from 2 pods, no fixed replicas, a PDB and a Service', () => {
    const d = deployment('gateway');
    expect(d.spec.replicas, 'the HPA owns the count').toBeUndefined();
    expect(d.spec.strategy.type).toBe('RollingUpdate');
    const hpa = one(Hpa, 'HorizontalPodAutoscaler', 'gateway');
    expect(hpa.spec.scaleTargetRef).toEqual({ apiVersion: 'apps/v1', kind: 'Deployment', name: 'gateway' });
    expect(hpa.spec.minReplicas).toBeGreaterThanOrEqual(2);
    expect(hpa.spec.maxReplicas).toBeGreaterThan(hpa.spec.minReplicas);
    expect(hpa.spec.metrics).toEqual([
      { type: 'Resource', resource: { name: 'cpu', target: { type: 'Utilization', averageUtilization: expect.any(Number) } } },
    ]);
    expect(ofKind('HorizontalPodAutoscaler')).toHaveLength(1);
    const pdb = one(Pdb, 'PodDisruptionBudget', 'gateway');
    expect(pdb.spec.minAvailable).toBe(1);
    expect(pdb.spec.minAvailable).toBeLessThan(hpa.spec.minReplicas);
    expect(selects(pdb.spec.selector.matchLabels, d.spec.template.metadata.labels)).toBe(true);
    const service = one(Service, 'Service', 'gateway');
    expect(selects(service.spec.selector, d.spec.template.metadata.labels)).toBe(true);
    expect(selects(service.spec.selector, deployment('api').spec.template.metadata.labels)).toBe(false);
    expect(service.spec.ports).toEqual([{ port: 8080, targetPort: 'http' }]);
  });

  it('runs the API on two pods behind a Service, with a PDB that still lets one be evicted', () => {
    const d = deployment('api');
    const pdb = one(Pdb, 'PodDisruptionBudget', 'api');
    expect(pdb.spec.minAvailable).toBe(1);
    expect(d.spec.replicas).toBeGreaterThan(pdb.spec.minAvailable);
    expect(selects(pdb.spec.selector.matchLabels, d.spec.template.metadata.labels)).toBe(true);
    const service = one(Service, 'Service', 'api');
    expect(selects(service.spec.selector, d.spec.template.metadata.labels)).toBe(true);
    expect(selects(service.spec.selector, deployment('gateway').spec.template.metadata.labels)).toBe(false);
  });

  it('runs one projector, never two at once', () => {
    const d = deployment('projector');
    expect(d.spec.replicas).toBe(1);
    expect(d.spec.strategy.type).toBe('Recreate');
    const labels = d.spec.template.metadata.labels;
    for (const m of [...ofKind('Service'), ...ofKind('PodDisruptionBudget')]) {
      const selector = m.kind === 'Service' ? Service.parse(m.raw).spec.selector : Pdb.parse(m.raw).spec.selector.matchLabels;
      expect(selects(selector, labels), `${m.kind}/${m.metadata.name}`).toBe(false);
    }
    expect(ofKind('HorizontalPodAutoscaler').map((m) => Hpa.parse(m.raw).spec.scaleTargetRef.name)).not.toContain('projector');
  });

  it('sets only environment variables the code reads', () => {
    const known = configEnvNames();
    // The extraction found the schema, not an empty or partial block.
    for (const name of ['ROLE', 'EVENTSTORE_URL', 'MONGODB_URL', 'DATABASE_URL', 'REDIS_URL', 'ADMIN_TOKEN', 'TRUST_PROXY', 'SMS_FROM'])
      expect(known).toContain(name);
    const used = [
      ...Object.keys(configMap()).map((name) => ['config.yaml', name]),
      ...Object.keys(secretExample()).map((name) => ['secret.example.yaml', name]),
      ...ROLES.flatMap((role) =>
        containerOf(role).env.flatMap((v) => [[role, v.name], ...(v.valueFrom?.secretKeyRef ? [[role, v.valueFrom.secretKeyRef.key]] : [])]),
      ),
    ];
    const unknown = used.filter(([, name]) => !known.has(name as string) && !readByChainRegistry(name as string));
    expect(unknown, 'names src/config.ts does not read').toEqual([]);
  });

  it('gives each role what it needs to start, and nothing it does not use', () => {
    for (const role of ROLES) {
      const config = loadConfig(roleEnv(role));
      expect(config.role).toBe(role);
      expect(config.host).toBe('0.0.0.0');
      expect(config.redisUrl, role).toBeDefined();
      // Behind the Ingress controller: client addresses from X-Forwarded-For.
      expect(config.trustProxy, role).toBe(true);
    }
    expect(loadConfig(roleEnv('api')).adminToken).not.toBeNull();
    const secretKeys = (role: string) => containerOf(role).env.flatMap((v) => (v.valueFrom?.secretKeyRef ? [v.valueFrom.secretKeyRef.key] : []));
    expect(secretKeys('gateway')).not.toContain('ADMIN_TOKEN');
    expect(secretKeys('projector')).not.toContain('ADMIN_TOKEN');
    expect(secretKeys('projector')).toEqual(expect.arrayContaining(['SMTP_URL', 'SMS_AUTH_TOKEN']));
    expect(secretKeys('gateway')).not.toContain('SMTP_URL');
    // Without the Secret's store URLs a role refuses to start, as the Secret example says.
    const withoutRedis = { ...roleEnv('gateway') };
    delete withoutRedis.REDIS_URL;
    expect(() => loadConfig(withoutRedis)).toThrow(/REDIS_URL/);
  });

  it('ships placeholders in the Secret example, never values', () => {
    for (const [key, value] of Object.entries(secretExample())) expect(value, key).toContain('CHANGE_ME');
    expect(read('deploy/kubernetes/.gitignore').split('\n')).toContain('secret.yaml');
  });

  it('routes the dashboard and API to `api` and each chain to `gateway` in the Ingress example, and not /metrics', () => {
    const paths = one(Ingress, 'Ingress', 'chain-gateway').spec.rules.flatMap((r) => r.http.paths);
    const to = (service: string) =>
      paths
        .filter((p) => p.backend.service.name === service)
        .map((p) => `${p.pathType} ${p.path}`)
        .sort();
    expect(to('api')).toEqual(['Exact /', 'Exact /healthz', 'Prefix /api', 'Prefix /assets']);
    // `local` is the embedded devnet of ROLE=all.
    expect(to('gateway')).toEqual(
      CHAIN_IDS.filter((id) => id !== 'local')
        .map((id) => `Prefix /${id}`)
        .sort(),
    );
    expect(paths.filter((p) => p.path === '/metrics' || (p.path === '/' && p.pathType === 'Prefix'))).toEqual([]);
    for (const p of paths) expect(['api', 'gateway']).toContain(p.backend.service.name);
  });

  it.skipIf(!onPath('yamllint'))('passes yamllint (strict, deploy/kubernetes/.yamllint)', () => {
    const run = spawnSync('yamllint', ['-c', join(DIR, '.yamllint'), '--strict', DIR], { encoding: 'utf8' });
    expect(`${run.stdout}${run.stderr}`.trim()).toBe('');
    expect(run.status).toBe(0);
  });

  it.skipIf(!onPath('kubectl'))('renders with kustomize (kubectl kustomize), the image set by its `images`', () => {
    const run = spawnSync('kubectl', ['kustomize', DIR], { encoding: 'utf8' });
    expect(run.stderr).toBe('');
    expect(run.status).toBe(0);
    const rendered = parseAllDocuments(run.stdout).map((doc) => Manifest.parse(doc.toJS()));
    expect(rendered.map((m) => `${m.kind}/${m.metadata.name}`).sort()).toEqual(
      manifests
        .filter((m) => m.kind !== 'Kustomization' && !m.file.endsWith('.example.yaml'))
        .map((m) => `${m.kind}/${m.metadata.name}`)
        .sort(),
    );
    for (const m of rendered.filter((r) => r.kind !== 'Namespace')) expect(m.metadata.namespace, `${m.kind}/${m.metadata.name}`).toBe('chain-gateway');
    expect(run.stdout).not.toMatch(/image: chain-gateway$/m);
  });
});
