// ParleyPlayerLoop.cs: the hidden object whose Update moves UnityWebRequestTransport's requests on, once a
// frame, on the main thread: the clock a WebGL player has instead of threads and timers.

#if UNITY_5_3_OR_NEWER
using System.Collections.Generic;
using UnityEngine;

namespace Parley
{
    [AddComponentMenu("")]
    public sealed class ParleyPlayerLoop : MonoBehaviour
    {
        static ParleyPlayerLoop running;
        readonly List<UnityWebRequestTransport> transports = new List<UnityWebRequestTransport>();

        internal static void Watch(UnityWebRequestTransport transport)
        {
            if (running == null)
            {
                var holder = new GameObject("Parley (UnityWebRequest)");
                holder.hideFlags = HideFlags.HideAndDontSave;
                if (Application.isPlaying) DontDestroyOnLoad(holder);
                running = holder.AddComponent<ParleyPlayerLoop>();
            }
            if (!running.transports.Contains(transport)) running.transports.Add(transport);
        }

        void Update()
        {
            for (int i = 0; i < transports.Count;)
            {
                var transport = transports[i];
                if (transport.Tick()) i++;
                else transports.Remove(transport); // watched again with its next request
            }
        }

        void OnDestroy()
        {
            if (running == this) running = null;
        }
    }
}
#endif
