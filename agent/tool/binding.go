package tool

// Binding secrets. A built-in tool that uses a resource leased to the
// session (its Notion integration, the TTS provider of its voice profile)
// cannot name that resource's secret in its runtime view: the name is
// config.json's, and the voice profile changes while the session runs
// (/voice). It names one of these references instead, and the agent's
// [Env.SecretFunc] resolves it, at the moment of the call, to the secret
// of the resource bound then (spec 14.3: a tool's secret references the
// named secret of the agent's bound resources). [Def.Execute] scopes them
// like any other name: a tool that does not declare the reference never
// obtains the secret behind it.
const (
	// SecretNotion is the secret of the session's Notion integration.
	SecretNotion = "binding.notion"
	// SecretTTS is the API key of the TTS provider of the session's
	// current voice profile.
	SecretTTS = "binding.tts"
)
