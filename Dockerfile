# One image for every role (ROLE=gateway|api|projector|all). Multi-stage: build with dev
# dependencies, run with production ones only, as a non-root user.
FROM node:20-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-fund --no-audit
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
COPY config ./config
RUN npm run build && npm prune --omit=dev

FROM node:20-bookworm-slim
# MALLOC_ARENA_MAX=2, MALLOC_TRIM_THRESHOLD_=131072 and --max-semi-space-size=8 (CMD): see docs/operations.md (Memory).
ENV NODE_ENV=production HOST=0.0.0.0 PORT=8080 DATA_DIR=/data LOCAL_DEVNET=off MALLOC_ARENA_MAX=2 MALLOC_TRIM_THRESHOLD_=131072
WORKDIR /app
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY --from=build /app/config ./config
COPY package.json ./
RUN mkdir -p /data && chown node:node /data
USER node
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
  CMD node -e "fetch('http://127.0.0.1:'+(process.env.PORT||8080)+'/readyz').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"
CMD ["node", "--max-semi-space-size=8", "dist/src/main.js"]
