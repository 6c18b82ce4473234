package main

import (
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/fleetmgr/fleetmgr/registry"
)

// vhostCmd is `fleetmgr vhost`, the explicit, separate way to delete a
// fleet's vhost (stop never does).
func (a *app) vhostCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "vhost",
		Short: "Manage fleets' broker vhosts (delete only; start creates them)",
	}
	cmd.AddCommand(a.vhostDeleteCmd())
	return cmd
}

func (a *app) vhostDeleteCmd() *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:   "delete NAME --yes-delete-messages",
		Short: "Delete a stopped fleet's vhost and every message queued in it",
		Long: `Delete fleet NAME's broker vhost, with its queues and every durable message in them
(members' inboxes). fleetmgr stop never does this. Refused without --yes-delete-messages, and
refused while the fleet runs. The fleet's broker user and password are kept; the next
fleetmgr start creates an empty vhost again.`,
		Example: "  fleetmgr vhost delete kb --yes-delete-messages",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			cfg, err := a.load()
			if err != nil {
				return err
			}
			f, err := cfg.Fleet(name)
			if err != nil {
				return &exitError{code: 2, err: err}
			}
			if err := a.refuseInPane(cmd.Context(), cfg, "delete the vhost of"); err != nil {
				return err
			}
			if !yes {
				return &exitError{code: 2, err: fmt.Errorf("refusing to delete vhost %q of fleet %s: it deletes every message queued in it; pass --yes-delete-messages to confirm", f.Vhost, name)}
			}
			m := a.manager(cfg, a.logger(slog.LevelWarn))
			deleted, err := m.DeleteVhost(cmd.Context(), name)
			if err != nil {
				return err
			}
			if deleted {
				fmt.Fprintf(a.stdout, "%s: vhost %s deleted\n", name, f.Vhost)
			} else {
				fmt.Fprintf(a.stdout, "%s: vhost %s did not exist\n", name, f.Vhost)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&yes, "yes-delete-messages", false, "confirm that every message in the vhost is deleted")
	return cmd
}

// brokerColumns gives the vhost and broker columns of `fleetmgr list`.
func brokerColumns(cfg *registry.Config, f *registry.Fleet) (vhost, brokerNote string) {
	if cfg.Broker == nil {
		return "", "no broker configured"
	}
	return f.Vhost, cfg.Broker.ManagementURL
}
