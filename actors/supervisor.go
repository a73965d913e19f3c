package actors

import (
	"github.com/asynkron/protoactor-go/actor"

	"github.com/kproxy/kproxy/messages"
)

// supervisor is the parent of the top actors: Rules (kernel modes), the
// Proxier and the Watcher. It restarts the one that failed, alone
// (supervision.Default), as a ServicePort does its children. Their Props carry
// the state that outlives them, so an incarnation it starts, or the next
// one after a failure, borrows the same state.
// supervisorName is the supervisor's name, the top actors' PIDs' prefix.
const supervisorName = "kproxy"

type supervisor struct {
	cfg     *Config
	desired *desiredState
	top     *messages.TopActors
}

func newSupervisor(cfg *Config, desired *desiredState) *actor.Props {
	return cfg.propsFor(func() actor.Actor { return &supervisor{cfg: cfg, desired: desired} })
}

// Receive implements actor.Actor.
func (s *supervisor) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *actor.Started:
		s.started(ctx)
	case *messages.GetTopActors:
		ctx.Respond(s.top)
	}
}

// started spawns the top actors: Rules first, which the ServicePorts tell,
// then the Proxier, then the Watcher, which feeds it.
func (s *supervisor) started(ctx actor.Context) {
	s.top = &messages.TopActors{}
	if s.cfg.Rules != nil {
		s.top.Rules = s.spawn(ctx, newRules(s.cfg), roleRules).GetId() // Config.rulesPID
	}
	proxier := s.spawn(ctx, newProxier(s.cfg, s.desired), roleProxier)
	s.top.Proxier = proxier.GetId()
	s.top.Watcher = s.spawn(ctx, newWatcher(s.cfg, proxier), roleWatcher).GetId()
}

func (s *supervisor) spawn(ctx actor.Context, props *actor.Props, name string) *actor.PID {
	pid, err := ctx.SpawnNamed(props, name)
	if err != nil {
		s.cfg.Log.Error().Err(err).Str("actor", name).Msg("cannot start")
	}
	return pid
}
